"""What people say, read as speech engines write it: answers (yes, no, wait), spoken numbers
and names, misheard directive words, and the hint that tells a model what dictated words
probably mean. Plugins reach these through `daemon.api`."""
