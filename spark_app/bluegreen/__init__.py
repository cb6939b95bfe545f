"""A blue/green upgrade's Spark side: where each version's sink queries stand, read from their
checkpoints (the rules are the contract's, ``spark_app.contract.blue_green``)."""
