"""The Raft-replicated controller (Resource Lead Agents).

raft.py (pysyncobj node) replicates statemachine.py (the pure decision log); detector.py derives
what needs doing from the KB; executor.py runs playbooks/migrate.yml; controller.py is the loop
tying them together under the leader-only, commit-before-act rules; status.py serves /healthz,
/metrics and /status; cli.py registers ``qonnect controller``.
"""
