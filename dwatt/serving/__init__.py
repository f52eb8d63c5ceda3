"""Serving a trained model: prediction on texts and word lists (`prediction`), input and output lines of
`dwatt predict` (`lines`), many heads over one backbone pass (`shared_heads`), ONNX export (`export`) and its
torch-free runtime (`onnx_runtime`), and int8 quantization (`quantization`). Nothing in training imports it."""
