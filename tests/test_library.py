"""The kernel library: stored files, shape validation, and meaning at small shapes."""

import numpy as np
import pytest
from references import REFERENCES

from dojo_ir import interpret, load, random_inputs
from dojo_ir.library import KERNELS, load_text, path


@pytest.mark.parametrize("name", KERNELS)
def test_stored_file_is_the_generator_output_at_the_paper_shape(name: str) -> None:
    assert load_text(name) == KERNELS[name].text()


def test_library_lists_table_3_in_order() -> None:
    assert list(KERNELS) == [
        "add", "batchnorm1", "batchnorm2", "bmm", "conv1", "conv2", "layernorm1", "layernorm2",
        "matmul", "mul", "reducemean", "relu", "relu_ffn", "rmsnorm", "softmax", "swiglu",
    ]  # fmt: skip
    assert set(REFERENCES) == set(KERNELS)


def test_overrides_replace_only_the_named_sizes() -> None:
    assert KERNELS["softmax"].text(m=3, n=5) == KERNELS["softmax"].small()
    assert "[24576, 7]" in KERNELS["softmax"].text(n=7)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"rows": 4}, "unknown shape parameter rows"),
        ({"m": 0}, "m must be a positive integer"),
        ({"n": -3}, "n must be a positive integer"),
        ({"n": 2.5}, "n must be a positive integer"),
        ({"n": True}, "n must be a positive integer"),
    ],
)
def test_bad_shapes_are_rejected(overrides: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        KERNELS["softmax"].text(**overrides)


def test_missing_shape_parameter_is_rejected() -> None:
    with pytest.raises(ValueError, match="missing shape parameter n"):
        KERNELS["matmul"].generate(m=2, k=3)


def test_conv_filter_must_fit_the_image() -> None:
    with pytest.raises(ValueError, match="does not fit"):
        KERNELS["conv2"].text(h=2)


def test_unknown_kernel_name_is_rejected() -> None:
    with pytest.raises(ValueError, match="no kernel named 'gelu'"):
        path("gelu")


@pytest.mark.parametrize("name", KERNELS)
def test_small_kernel_matches_the_numpy_reference(name: str) -> None:
    program = load(KERNELS[name].small())
    inputs = random_inputs(program, seed=0)
    outputs = interpret(program, inputs)
    expected = REFERENCES[name](inputs)
    assert set(outputs) == set(expected)
    for array, want in expected.items():
        # f32 arithmetic against a float64 reference
        np.testing.assert_allclose(outputs[array], want, rtol=1e-4, atol=1e-5, err_msg=f"{name}: {array}")
