"""ONNX models into PerfDojo: each node a `.dojo` kernel (`dojo import`), and the model run on the
tuned library (`dojo model run`). Needs the `onnx` package; running also needs `onnxruntime`."""
