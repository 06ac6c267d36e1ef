"""The keyed-state codec: headers, layouts, decode, encode, the byte-level re-key and timers."""
