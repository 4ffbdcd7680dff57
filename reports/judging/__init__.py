"""What the numbers say, stated only where the data supports it: verdicts as data and their words,
SUSPECT ratios, the decision table, time to a target and goodput, the knobs turned before more
devices, and repeats until conclusive. May import the numbers and step-model wings."""
