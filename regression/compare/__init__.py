"""How two outputs differ: nested values compared bit for bit, two tensors' differences in
numbers and words."""
