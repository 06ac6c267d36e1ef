"""Writing savepoints: rescaled operator state, regrouped keyed state, NATIVE output, finished operators, the commit."""
