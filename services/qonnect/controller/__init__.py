"""The Raft-replicated controller (Resource Lead Agents).

raft.py (pysyncobj node) replicates statemachine.py (the pure decision log); detector.py judges
the clusters and triggers.py what each application needs, from the KB; hedging.py starts standby
copies while a cluster is suspect; executor.py runs playbooks/migrate.yml; loop.py is the replica's
lifecycle and tick, tying them together under the leader-only, commit-before-act rules through one
module per job (leadership.py, detection.py, deciding.py, scheduling.py, planning.py, runs.py,
report.py; the state they share in state.py); status.py serves /healthz, /metrics and /status;
cli.py registers ``qonnect controller``. docs/architecture.md maps every file to its one job.
"""
