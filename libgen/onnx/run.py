"""`dojo model run`: an ONNX model run on a tuned library, with ONNX Runtime for the nodes it lacks.

    runner = ModelRunner("encoder.onnx", "build/encoder_lib")
    outputs = runner.run({"x": x})                 # the graph's outputs by name
    runner.placement      # node name -> "library", "onnxruntime", "view", "constant" or "unused"
    outputs, seconds = runner.run_timed({"x": x})  # and each step's time (libgen/onnx/profile.py)

The model is imported in memory as `dojo import` would write it (`import_model`), fused or not as
asked, or else as the import whose kernels the library holds more of. A call of the
import runs on the library's kernel of its name only when that kernel was built from the same spec
(the manifest's `spec_hash` is `text_hash` of the imported kernel), so a library built from another
model or another import never computes something else. Reshape, Flatten, Squeeze, Unsqueeze and
Identity are numpy views of their input; nodes of constant inputs only (Constant, what the import
folds) are computed once, when the runner is made, and so are the constants the import derives
(a Conv's weights with a BatchNormalization folded in) and the Shape or Size of a value of static
shape; every other node runs on ONNX Runtime: one
session per run of consecutive such nodes, built once, with as many intra-op threads as the
process has cores. Every value of static shape has a 64-byte aligned buffer, planned once, that
the library's kernels and ONNX Runtime (through an IOBinding) write in place, so a run only copies
the inputs in and the outputs out; values whose lives do not overlap share one (plan.py's `Pool`). `run`
is not reentrant: one thread at a time. `run_timed` is the same run, each step timed: a loop of its
own, so that `run` pays nothing for profiling.
"""

from __future__ import annotations

import math
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from dojo_ir import load
from runner.affinity import cores, on_cpus

from ..manifest import arrays
from ..runtime import Library, aligned_empty, read_manifest
from .plan import (
    Info,
    Pool,
    RunError,
    Unit,
    aligned_copy,
    classify,
    concatenated_in_place,
    dead_after,
    layout_consistent,
    merged,
    needed,
    ordered,
    shape_of,
    static_shape,
    sub_model,
    units_of,
    value_infos,
)

RANDOM = frozenset({"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial",
                    "Bernoulli"})  # never folded into constants



@dataclass(frozen=True)
class Step:
    """One step of a run: a call of the library's `kernel`, or (kernel None) an ONNX Runtime
    session; `nodes` are the ONNX nodes it computes."""

    kernel: str | None
    nodes: tuple[str, ...]


@dataclass
class _LibraryStep:
    library: Library
    kernel: Any  # runtime.Kernel
    pointers: list[int]  # the buffers of its inputs and outputs: a kernel's arrays have static shapes

    def run(self, env: dict[str, np.ndarray]) -> None:
        self.library.call(self.kernel, self.pointers)


@dataclass
class _SessionStep:
    session: Any  # onnxruntime.InferenceSession
    binding: Any  # its IOBinding
    late_inputs: list[str]
    late_outputs: list[str]  # bound to ONNX Runtime's own memory, in binding order after the placed ones
    placed: int  # how many outputs are bound to buffers of ours
    nodes: str  # the nodes it runs, for messages

    def run(self, env: dict[str, np.ndarray]) -> None:
        given = [np.ascontiguousarray(env[name]) for name in self.late_inputs]  # alive while the session runs
        for name, value in zip(self.late_inputs, given, strict=True):
            self.binding.bind_cpu_input(name, value)
        try:
            self.session.run_with_iobinding(self.binding)
        except Exception as error:  # ORT raises its own types: the inputs' values fail a node (an index, a shape)
            raise RunError(f"ONNX Runtime failed to run nodes {self.nodes}: {error}") from None
        if self.late_outputs:
            made = self.binding.get_outputs()[self.placed:]
            env.update((name, value.numpy()) for name, value in zip(self.late_outputs, made, strict=True))


class ModelRunner:
    """The model at `model_path` run on the library at `library_dir` (see the module's docstring)."""

    def __init__(self, model_path: str | Path, library_dir: str | Path, fuse: bool | None = None,
                 input_shapes: Mapping[str, Sequence[int]] | None = None):
        model_path, library_dir = Path(model_path), Path(library_dir)
        manifest = read_library(library_dir)
        model = read_model(model_path, input_shapes)
        imported, held = import_in_memory(model_path, fuse, {k["name"]: k.get("spec_hash") for k in
                                                             manifest["kernels"]}, input_shapes)
        held = layout_consistent(held, imported.calls, imported.blocked)
        library = load_library(library_dir, manifest, imported.kernels, held)
        self.model = model_path.name
        self.onnx_model = model  # the model as read, at its input shapes
        self._library, self._nodes = library, list(model.graph.node)
        names = [entry["name"] for entry in imported.nodes]  # one per node, in the graph's order
        self.node_names = names
        self.infos = value_infos(model)
        self.inputs = model_inputs(model, self.infos, self.model)
        self.outputs = [value.name for value in model.graph.output]
        self._constants = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        self._constants.update((name, derived.value) for name, derived in imported.constants.items())

        units = units_of(self._nodes, names, imported.calls)
        for unit in units:
            classify(unit, self._nodes, library, held, self.infos)
        units = needed(ordered(units), self.outputs)
        for unit in units:
            known = static_shape(unit, self._nodes, self.infos)
            if known is not None:  # a Shape of a value of static shape, as the import folds it
                self._constants[unit.outputs[0]], unit.kind = known, "constant"
            elif unit.kind == "view" and unit.inputs[0] in self._constants:  # shape arithmetic goes on
                self._constants[unit.outputs[0]] = self._constants[unit.inputs[0]].reshape(
                    self.infos[unit.outputs[0]].shape)
                unit.kind = "constant"
            elif unit.kind == "onnxruntime" and all(n in self._constants for n in unit.inputs) and not any(
                    self._nodes[i].op_type in RANDOM for i in unit.nodes):
                self._constants.update(zip(unit.outputs, self._session(unit, self._constants).run(None, {}),
                                           strict=True))
                unit.kind = "constant"
        self._parts = concatenated_in_place(units, self._nodes, self.infos, self.outputs)
        self.placement: dict[str, str] = dict.fromkeys(names, "unused")
        for unit in units:
            self.placement.update((names[i], unit.kind) for i in unit.nodes)
        self._fixed = {name: aligned_copy(value) for name, value in self._constants.items()}
        self._fixed.update((name, aligned_empty(info.dtype, info.shape)) for name, info in self.inputs.items())
        self.imported = imported  # the import the run follows: its kernels' specs, for profiles
        self._pool = Pool()
        self._pooled: dict[str, np.ndarray] = {}  # a value made by a step -> the pool's buffer holding it
        joined = merged(units, self.outputs)
        dead = dead_after(joined, self.outputs, self._parts)
        self._steps = []
        self.steps: list[Step] = []  # what each of the run's steps does, in order
        for position, unit in enumerate(joined):
            planned = self._plan(unit)
            self._steps += planned
            self.steps += [Step(unit.kernel if unit.kind == "library" else None, tuple(names[i] for i in unit.nodes))
                           for _ in planned]
            for name in dead.get(position, ()):
                if name in self._pooled:
                    self._pool.give(self._pooled.pop(name))

    # -- what ran where -----------------------------------------------------------------------------

    @property
    def library_nodes(self) -> list[str]:
        return [name for name, where in self.placement.items() if where == "library"]

    @property
    def planned_bytes(self) -> int:
        """The bytes of the buffers that the steps' values share (not the inputs' nor the constants')."""
        return self._pool.allocated

    @property
    def onnxruntime_nodes(self) -> list[str]:
        return [name for name, where in self.placement.items() if where == "onnxruntime"]

    # -- planning -----------------------------------------------------------------------------------

    def _buffer(self, name: str) -> np.ndarray | None:
        """The buffer of `name`, allocated now when its shape is known; None when it is made only
        during the run."""
        if name not in self._fixed and name in self._parts:  # written into its Concat's output
            whole, offset = self._parts[name]
            info = self.infos[name]
            stretch = self._buffer(whole).reshape(-1).view(np.uint8)[offset:offset + info.dtype.itemsize * math.prod(
                info.shape)]
            self._fixed[name] = stretch.view(info.dtype).reshape(info.shape)
        elif name not in self._fixed and shape_of(self.infos, name) is not None:
            self._pooled[name], self._fixed[name] = self._pool.take(self.infos[name].dtype, self.infos[name].shape)
        return self._fixed.get(name)

    def _plan(self, unit: Unit) -> list[Any]:
        if unit.kind == "view" and unit.inputs[0] in self._parts:  # a Concat its inputs' kernels wrote
            return []
        if unit.kind == "view":  # of a value of static shape, hence of a buffer made before
            self._fixed[unit.outputs[0]] = self._fixed[unit.inputs[0]].reshape(self.infos[unit.outputs[0]].shape)
            return []
        if unit.kind == "library":
            pointers = [self._buffer(name).ctypes.data for name in unit.inputs + unit.outputs]
            return [_LibraryStep(self._library, self._library.kernels[unit.kernel], pointers)]
        return [] if unit.kind == "constant" else [self._bound(unit)]

    def _session(self, unit: Unit, constants: Mapping[str, np.ndarray]) -> Any:
        """An ONNX Runtime session of the unit's nodes, the inputs in `constants` as initializers."""
        import onnxruntime as ort

        nodes = [self._nodes[i] for i in unit.nodes]
        sub = sub_model(self.onnx_model, nodes, unit.inputs, unit.outputs, self.infos, constants)
        options = ort.SessionOptions()
        options.intra_op_num_threads = cores()
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        # the library's kernels run between this session's calls: idle threads that spin would take their cores
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            with on_cpus():  # its thread pool inherits the thread's affinity, which OpenMP may have narrowed
                return ort.InferenceSession(sub.SerializeToString(), options, providers=["CPUExecutionProvider"])
        except Exception as error:  # ORT raises its own exception types, one per failure
            raise RunError(f"{self.model}: ONNX Runtime cannot run nodes "
                           f"{', '.join(n.name or n.op_type for n in nodes)}: {error}") from None

    def _bound(self, unit: Unit) -> _SessionStep:
        """The unit's session, its inputs and outputs bound to the buffers they have."""
        folded = {name: self._fixed[name] for name in unit.inputs if name in self._constants}
        session = self._session(unit, folded)
        binding = session.io_binding()
        late_inputs, late_outputs = [], []
        for name in (n for n in unit.inputs if n not in folded):
            buffer = self._buffer(name)
            if buffer is None:
                late_inputs.append(name)
            else:
                binding.bind_input(name, "cpu", 0, buffer.dtype, buffer.shape, buffer.ctypes.data)
        placed = 0
        for name in unit.outputs:
            buffer = self._buffer(name)
            if buffer is not None:
                binding.bind_output(name, "cpu", 0, buffer.dtype, buffer.shape, buffer.ctypes.data)
                placed += 1
        for name in unit.outputs:
            if name not in self._fixed:
                binding.bind_output(name, "cpu")
                late_outputs.append(name)
        nodes = ", ".join(self._nodes[i].name or self._nodes[i].op_type for i in unit.nodes)
        return _SessionStep(session, binding, late_inputs, late_outputs, placed, f"{nodes} of {self.model}")

    # -- running ------------------------------------------------------------------------------------

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The graph's outputs, by name, for the inputs `feeds` (every input of the model, each of
        its dtype and shape)."""
        self.check(feeds)
        env = dict(self._fixed)
        for name in self.inputs:
            np.copyto(self._fixed[name], feeds[name])
        for step in self._steps:
            step.run(env)
        return {name: np.array(env[name]) for name in self.outputs}

    def run_timed(self, feeds: Mapping[str, np.ndarray], warm: bool = False) -> tuple[dict[str, np.ndarray],
                                                                                      list[float]]:
        """`run`'s outputs and the seconds each of its parts took: copying the inputs in, each
        step of `steps` in order, and copying the outputs out. With `warm`, each library step is
        called once more just before its timed call, so that its weights, inputs and workspace are
        in cache as they would be were it run alone (a kernel's outputs are a function of its
        inputs, which no kernel's outputs share: the second call writes what the first did)."""
        self.check(feeds)
        clock = time.perf_counter
        seconds = []
        env = dict(self._fixed)
        began = clock()
        for name in self.inputs:
            np.copyto(self._fixed[name], feeds[name])
        seconds.append(clock() - began)
        for step in self._steps:
            if warm and isinstance(step, _LibraryStep):
                step.run(env)
            began = clock()
            step.run(env)
            seconds.append(clock() - began)
        began = clock()
        outputs = {name: np.array(env[name]) for name in self.outputs}
        seconds.append(clock() - began)
        return outputs, seconds

    def check(self, feeds: Mapping[str, Any]) -> None:
        """Raise RunError unless `feeds` gives every input of the model at its dtype and shape."""
        known = ", ".join(f"`{n}`" for n in self.inputs)
        for name in feeds:
            if name not in self.inputs:
                raise RunError(f"`{name}` is not an input of {self.model} (its inputs: {known})")
        for name, info in self.inputs.items():
            if name not in feeds:
                raise RunError(f"input `{name}` of {self.model} is missing (its inputs: {known})")
            value = feeds[name]
            if not isinstance(value, np.ndarray) or value.dtype != info.dtype or value.shape != info.shape:
                got = f"{value.dtype} {list(value.shape)}" if isinstance(value, np.ndarray) else type(value).__name__
                raise RunError(f"input `{name}` of {self.model} must be {info.dtype} {list(info.shape)}, not {got}")


# -- the library and the model ----------------------------------------------------------------------

def read_library(directory: Path) -> dict[str, Any]:
    """The manifest of the library at `directory`, checked for form; nothing of it is loaded."""
    if not directory.is_dir():
        raise RunError(f"{directory}: no such library directory")
    if not (directory / "manifest.json").is_file():
        raise RunError(f"{directory}: not a library: it has no manifest.json (`dojo library build` writes one)")
    try:
        return read_manifest(directory)
    except (OSError, ValueError) as error:
        raise RunError(f"{directory}: cannot load the library: {error}") from None


def load_library(directory: Path, manifest: Mapping[str, Any], kernels: Mapping[str, str],
                 held: Collection[str]) -> Library:
    """The library at `directory` with only the kernels `held` (built from the imported specs
    `kernels`, by name), each taking the arrays its spec declares, whatever the manifest says.
    Loading it runs its code; it is loaded only after the specs' hashes have been checked."""
    entries = []
    for entry in manifest["kernels"]:
        if entry["name"] in held:
            program = load(kernels[entry["name"]])
            entries.append({**entry, "inputs": [a.to_json() for a in arrays(program, program.inputs)],
                            "outputs": [a.to_json() for a in arrays(program, program.outputs)]})
    try:
        return Library(directory, {**manifest, "kernels": entries})
    except (OSError, ValueError) as error:
        raise RunError(f"{directory}: cannot load the library: {error}") from None


def import_in_memory(path: Path, fuse: bool | None, hashes: Mapping[str, str],
                     input_shapes: Mapping[str, Sequence[int]] | None = None) -> tuple[Any, set[str]]:
    """What `dojo import` would write for the model at `path` (its inputs at `input_shapes`), with
    `--fuse` or not (None: the import of which the library holds more kernels, the unfused one when
    they tie), and the names of its kernels that the library holds built from the same spec."""
    from agent.evaluate import text_hash

    from .importer import ModelError, import_model  # the importer loads the operator catalogue

    def held(imported: Any) -> set[str]:
        return {name for name, text in imported.kernels.items() if hashes.get(name) == text_hash(load(text))}

    try:
        imports = [import_model(path, fuse=choice, input_shapes=input_shapes)
                   for choice in ([False, True] if fuse is None else [fuse])]
    except ModelError as error:
        raise RunError(str(error).replace(": error: ", ": ", 1)) from None
    return max(((imported, held(imported)) for imported in imports), key=lambda pair: len(pair[1]))


def read_model(path: Path, input_shapes: Mapping[str, Sequence[int]] | None = None) -> onnx.ModelProto:
    """The model at `path` as the import sees it: its inputs at `input_shapes`, its shapes inferred."""
    from .importer import ModelError, load_model, static_model

    try:
        name, model = load_model(path)
        return static_model(name, model, input_shapes)
    except ModelError as error:
        raise RunError(str(error).replace(": error: ", ": ", 1)) from None


def model_inputs(model: onnx.ModelProto, infos: Mapping[str, Info], name: str) -> dict[str, Info]:
    """The inputs a run is given (not the initializers), each of fixed shape."""
    initializers = {t.name for t in model.graph.initializer}
    inputs = {}
    for value in model.graph.input:
        if value.name not in initializers:
            if shape_of(infos, value.name) is None:
                raise RunError(f"{name}: input `{value.name}` has no fixed shape; give it one with --input-shape "
                               f"{value.name}=D,D,... (as to `dojo import`)")
            inputs[value.name] = infos[value.name]
    return inputs


# -- arrays -----------------------------------------------------------------------------------------


