"""The scheduling study: offline optimum, the paper's experiments, their report, the placement benchmark."""
