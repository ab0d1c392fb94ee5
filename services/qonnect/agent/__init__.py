"""Resource Agent: one per cluster, keeps the Knowledge Base current about that cluster.

It reads the cluster only through a kubeconfig (``collector``), measures round-trip times
(``latency``), stamps every report with a sequence number that only grows (``sequence``) and
buffers reports while the KB is away (``buffer``); ``runner`` ties these into the loop.
"""
