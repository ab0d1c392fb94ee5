"""``qonnect demo``: the whole system on the testbed, playing QONNECT's evaluation end to end."""
