"""What a model may ask of the machine, checked before anything is read or allocated
(docs/onnx.md, "Limits"): a file from someone else never decides how much memory the import takes."""

MODEL_BYTES = 2**31  # protobuf's own limit on one message
EXTERNAL_DATA_BYTES = 2**34  # 16 GiB of weights beside the model, all tensors together
TENSOR_ELEMENTS = 2**30  # a value a kernel reads or writes: 4 GiB of f32, as the interpreter allows
FOLDED_ELEMENTS = 2**24  # a value the import computes itself (shape arithmetic, masks): 128 MiB of i64
