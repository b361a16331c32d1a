"""Token index: bitmasks, the compiled artifact with per-state masks, and the compiler."""
