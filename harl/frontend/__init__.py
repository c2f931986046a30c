"""From an ONNX file to TVM tuning tasks."""
