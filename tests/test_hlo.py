"""shardlab.programs.hlo, the one HLO reader: its public interface on hand-written HLO texts (each passed
through XLA's own parser first) and on real compiled programs, checked against XLA's parser, the
program's memory analysis, the mesh's device groups and the source of this file."""

import shardlab

DEVICES = shardlab.setup_devices(8)  # at import, before anything else starts JAX

import ast  # noqa: E402
import inspect  # noqa: E402
import pathlib  # noqa: E402
import re  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

from shardlab.programs.hlo import (Array, Operand, arrays, async_dones, async_half, closing_bracket,  # noqa: E402
                                   parse_instruction, parse_module, parse_shape, replica_groups,
                                   source_target_pairs, split_top_level)


def xla_module(text: str):
    """XLA's own reading of HLO text (every admitted jaxlib has this parser)."""
    from jaxlib import _hlo

    return _hlo.hlo_module_from_text(text)


def _value(x):
    return x() if callable(x) else x        # jaxlib's bindings: methods in some versions, properties in others


# XLA's opcodes whose enum name is not their name in HLO text
_ENUM_ALIASES = {"sin": "sine", "cos": "cosine", "optimizationbarrier": "optbarrier"}


def xla_reading(text: str) -> dict:
    """``{computation: {instruction: (opcode, operand names)}}`` as XLA's parser reads the text, opcodes
    written without dashes in lower case (XLA's ``kAllReduce`` -> ``allreduce``)."""
    out = {}
    for comp in xla_module(text).computations():
        instrs = {}
        for ins in _value(comp.instructions):
            opcode = _value(ins.opcode).name[1:].lower()
            opcode = _ENUM_ALIASES.get(opcode, opcode)
            instrs[_value(ins.name)] = (opcode, tuple(_value(o.name) for o in _value(ins.operands)))
        out[_value(comp.name)] = instrs
    return out


def our_reading(text: str) -> dict:
    """The same from :func:`parse_module` (a parameter's number and a constant's literal, which it gives
    as their operands, are no instructions to XLA)."""
    module = parse_module(text)
    return {name: {i.name: (i.opcode.replace("-", ""),
                            () if i.opcode in ("parameter", "constant") else i.operand_names) for i in comp}
            for name, comp in module.computations.items()}


# ----------------------------------------------------------------------------------------------
# Hand-written HLO
# ----------------------------------------------------------------------------------------------

HANDWRITTEN = """HloModule hand, entry_computation_layout={(f32[8,2]{1,0:S(5)}, s32[])->(f32[8,2]{1,0}, s4[6]{0})}, num_partitions=4, replica_count=2

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%cond (c: (s32[], f32[8,2])) -> pred[] {
  %c = (s32[], f32[8,2]{1,0}) parameter(0)
  %i = s32[] get-tuple-element(%c), index=0
  %n = s32[] constant(6)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

%body (d: (s32[], f32[8,2])) -> (s32[], f32[8,2]) {
  %d = (s32[], f32[8,2]{1,0}) parameter(0)
  %j = s32[] get-tuple-element(%d), index=0
  %one = s32[] constant(1)
  %next = s32[] add(%j, %one)
  %v = f32[8,2]{1,0} get-tuple-element(%d), index=1
  %ar = f32[8,2]{1,0} all-reduce(f32[8,2]{1,0} %v), replica_groups={{0,1,2,3},{4,5,6,7}}, to_apply=%add, metadata={op_name="jit(f)/a, b {c}" source_file="/x/y.py" source_line=12}
  ROOT %t = (s32[], f32[8,2]{1,0}) tuple(%next, /*index=1*/%ar)
}

%on_host (q: f32[2]) -> f32[2] {
  ROOT %q = f32[2]{0} parameter(0)
}, execution_thread="host"

ENTRY %main (p: f32[8,2], k: s32[]) -> (f32[8,2], s4[6]) {
  %p = f32[8,2]{1,0:S(5)} parameter(0)
  %k = s32[] parameter(1)
  %zero = s32[] constant(0)
  %init = (s32[], f32[8,2]{1,0}) tuple(%zero, %p)
  %loop = (s32[], f32[8,2]{1,0}) while(%init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"6"}}
  %out = f32[8,2]{1,0} get-tuple-element(%loop), index=1
  %ag-start = (f32[8,2]{1,0}, f32[32,2]{1,0}) all-gather-start(%out), replica_groups=[2,4]<=[8], dimensions={0}
  %ag-done = f32[32,2]{1,0} all-gather-done(%ag-start)
  %cp = f32[32,2]{1,0} collective-permute(%ag-done), source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
  %nibbles = s4[6]{0} constant({1, 2, 3, 4, 5, 6})
  ROOT %r = (f32[8,2]{1,0}, s4[6]{0}) tuple(%out, %nibbles)
}
"""


def test_a_handwritten_module_reads_as_xla_reads_it():
    xla_module(HANDWRITTEN)
    assert our_reading(HANDWRITTEN) == xla_reading(HANDWRITTEN)
    module = parse_module(HANDWRITTEN)
    assert list(module.computations) == ["add", "cond", "body", "on_host", "main"]     # text order
    assert module.entry == "main" and module.computations["main"].is_entry
    assert not module.computations["body"].is_entry
    assert module.num_devices == 8                                   # 4 partitions times 2 replicas
    assert [c.execution_thread for c in module.computations.values()] == [None, None, None, "host", None]
    assert module.computations["cond"].result_text == "pred[]"
    assert len(module.instructions) == sum(len(c) for c in module.computations.values()) == 26
    body = module.computations["body"]
    assert [i.name for i in body] == ["d", "j", "one", "next", "v", "ar", "t"]   # text order
    assert body["d"].operand_names == ("0",) and body["one"].operand_names == ("1",)
    assert body.root is body["t"] and body["t"].is_root and not body["ar"].is_root
    assert "ar" in body and "nope" not in body and body.get("nope") is None
    with pytest.raises(KeyError):
        body["nope"]
    assert module.calls()["body"] == [(module.computations["main"]["loop"], "main")]
    assert module.calls()["add"] == [(body["ar"], "body")] and module.calls()["main"] == []


def test_an_instruction_and_its_attributes():
    module = parse_module(HANDWRITTEN)
    ar = module.computations["body"]["ar"]
    assert (ar.name, ar.opcode, ar.computation, ar.shape, ar.shape_text) == (
        "ar", "all-reduce", "body", Array("f32", (8, 2)), "f32[8,2]{1,0}")
    assert ar.operands == (Operand("v", Array("f32", (8, 2))),)      # the shape where the text prints one
    assert module.computations["body"]["t"].operands == (Operand("next"), Operand("ar"))   # comment dropped
    assert module.computations["body"]["t"].line == "ROOT %t = (s32[], f32[8,2]{1,0}) tuple(%next, %ar)"
    assert ar.attributes.startswith("replica_groups=")
    # a comma inside quotes or braces does not split an attribute
    assert ar.attribute("to_apply") == "%add" and ar.attribute("nope") is None
    assert ar.metadata == {"op_name": "jit(f)/a, b {c}", "source_file": "/x/y.py", "source_line": "12"}
    assert module.source(ar).file == "/x/y.py" and module.source(ar).line == 12
    assert module.source(ar).function is None
    assert module.computations["add"]["s"].metadata is None
    main = module.computations["main"]
    loop = main["loop"]
    assert loop.called_computations == ("body", "cond")                # CALL_ATTRIBUTES order: body first
    assert (loop.called("body"), loop.called("condition"), loop.called("calls")) == ("body", "cond", None)
    assert loop.known_trip_count == 6 and main["out"].known_trip_count is None
    assert main["ag-start"].dimensions == (0,) and ar.dimensions == ()
    assert main["out"].attribute("index") == "1"
    assert main["nibbles"].shape.nbytes == 3                         # 6 values of 4 bits, packed
    assert parse_instruction("not an instruction") is None
    assert parse_instruction("%x = f32[2] parameter") is None        # no operand list
    call = parse_instruction('%c = f32[2]{0} custom-call(%p), custom_call_target="MoveToHost", '
                             'backend_config="a,b=c"')
    assert call.custom_call_target == "MoveToHost" and call.attribute("backend_config") == '"a,b=c"'
    assert call.computation is None


def test_the_entry_layout_keeps_memory_spaces():
    module = parse_module(HANDWRITTEN)
    assert module.entry_computation_layout() == (["f32[8,2]{1,0:S(5)}", "s32[]"], ["f32[8,2]{1,0}", "s4[6]{0}"])
    assert parse_module("HloModule m\n").entry_computation_layout() is None
    assert parse_module("HloModule m\n").num_devices == 1                 # XLA leaves out 1s
    assert parse_module("%x = f32[2] parameter(0)").num_devices is None   # no header: unknown


def test_shapes():
    assert parse_shape("f32[16,8]{1,0}") == Array("f32", (16, 8))
    assert parse_shape("bf16[]") == Array("bf16", ())
    assert parse_shape("f32[<=8,?]") == Array("f32", (8, 0))
    assert parse_shape("token[]") == Array("token", ())
    nested = parse_shape("(f32[2]{0}, (s32[], u8[3]{0:S(5)}))")
    assert nested == (Array("f32", (2,)), (Array("s32", ()), Array("u8", (3,))))
    assert arrays(nested) == [Array("f32", (2,)), Array("s32", ()), Array("u8", (3,))]
    assert str(Array("f32", (2, 3))) == "f32[2,3]"
    assert Array("f32", (2, 3)).nbytes == 24 and Array("s4", (3,)).nbytes == 2 and Array("s2", (5,)).nbytes == 2
    with pytest.raises(ValueError, match="element type"):
        Array("q7", (2,)).nbytes
    with pytest.raises(ValueError, match="shape"):
        parse_shape("%p")


def test_brackets():
    assert split_top_level("a, f(b, c), {d, e}, [1,2]") == ["a", "f(b, c)", "{d, e}", "[1,2]"]
    assert split_top_level("a;b;;c", ";") == ["a", "b", "c"]
    assert closing_bracket("x{a(b)[c]}y", 1) == 9
    with pytest.raises(ValueError, match="unbalanced"):
        closing_bracket("{(", 0)


def test_replica_groups_in_three_spellings():
    assert replica_groups("replica_groups={{0,2},{1,3}}, to_apply=%add", None) == [[0, 2], [1, 3]]
    assert replica_groups("replica_groups={}", 4) == [[0, 1, 2, 3]]
    with pytest.raises(ValueError, match="num_devices"):
        replica_groups("replica_groups={}", None)
    assert replica_groups("to_apply=%add", 4) is None
    # iota: iota(8).reshape(4, 2).T.reshape(2, 4), by numpy
    assert replica_groups("replica_groups=[2,4]<=[4,2]T(1,0)", None) == \
        np.arange(8).reshape(4, 2).T.reshape(2, 4).tolist()
    assert replica_groups("replica_groups=[2,4]<=[8]", None) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    # mesh axes: the devices that differ along y only, then along x only
    assert replica_groups("replica_groups=mesh['x'=2,'y'=4] {'y'}", None) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert replica_groups("replica_groups=mesh['x'=2,'y'=4] {'x'}", None) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    with pytest.raises(ValueError, match="replica groups"):
        replica_groups("replica_groups=nonsense", None)
    assert source_target_pairs("source_target_pairs={{0,1},{1,0}}, channel_id=2") == [(0, 1), (1, 0)]
    assert source_target_pairs("channel_id=2") is None


def test_async_halves():
    assert async_half("all-gather-start") == ("all-gather", "start")
    assert async_half("async-done") == ("async", "done")
    assert async_half("add") == ("add", "")
    module = parse_module(HANDWRITTEN)
    dones = async_dones(module.instructions)
    assert list(dones) == ["ag-start"] and dones["ag-start"].name == "ag-done"
    start = module.computations["main"]["ag-start"]
    assert replica_groups(start.attributes, None) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert source_target_pairs(module.computations["main"]["cp"].attributes) == [(0, 1), (1, 2), (2, 3), (3, 0)]


def test_a_computation_without_its_signature():
    text = "HloModule m\n\nadd {\n  a = f32[] parameter(0)\n  ROOT s = f32[] add(a, a)\n}\n\n" \
           "ENTRY e {\n  p = f32[4]{0} parameter(0)\n  ROOT n = f32[4]{0} negate(p)\n}\n"
    assert our_reading(text) == xla_reading(text)
    module = parse_module(text)
    assert module.entry == "e" and module.computations["add"].result_text == ""


def test_loose_instruction_lines_belong_to_no_computation():
    module = parse_module("%p = f32[4]{0} parameter(0)\n%n = f32[4]{0} negate(%p)\n")
    assert module.computations == {} and module.entry is None
    assert [(i.name, i.computation) for i in module.instructions] == [("p", None), ("n", None)]


# ----------------------------------------------------------------------------------------------
# Real compiled programs, 8 simulated CPU devices
# ----------------------------------------------------------------------------------------------

MESH = jax.make_mesh((2, 4), ("x", "y"))
POSITION = {d: i for i, d in enumerate(MESH.devices.flat)}          # jit's device assignment: the mesh's order


def summed_over(axis: str):
    def f(a):
        return jax.shard_map(lambda v: jax.lax.psum(v, axis), mesh=MESH, in_specs=P("x", "y"),
                             out_specs=P("x" if axis == "y" else None, "y" if axis == "x" else None))(a)

    x = jax.ShapeDtypeStruct((16, 8), jnp.float32, sharding=NamedSharding(MESH, P("x", "y")))
    return jax.jit(f).lower(x).compile()


@pytest.mark.parametrize("axis", ["x", "y"])
def test_replica_groups_of_a_compiled_psum_are_the_mesh_groups(axis):
    compiled = summed_over(axis)
    module = parse_module(compiled.as_text())
    (ar,) = [i for i in module.instructions if i.opcode == "all-reduce"]
    groups = replica_groups(ar.attributes, module.num_devices)
    # the groups of the mesh: the devices that differ only along ``axis``
    along = MESH.axis_names.index(axis)
    mesh_groups = np.moveaxis(MESH.devices, along, -1).reshape(-1, MESH.devices.shape[along])
    expected = sorted(sorted(POSITION[d] for d in g) for g in mesh_groups)
    assert sorted(sorted(g) for g in groups) == expected
    assert len(groups) == 8 // MESH.devices.shape[along]
    assert module.num_devices == 8


def test_a_compiled_program_reads_as_xla_reads_it():
    compiled = summed_over("y")
    text = compiled.as_text()
    assert our_reading(text) == xla_reading(text)
    module = parse_module(text)
    # the entry's parameters: one per argument, each the shard one device holds, XLA's bytes
    params = [i for i in module.computations[module.entry] if i.opcode == "parameter"]
    assert [p.shape for p in params] == [Array("f32", (8, 2))]                # (16, 8) over 2 x 4
    assert sum(p.shape.nbytes for p in params) == compiled.memory_analysis().argument_size_in_bytes
    root = module.computations[module.entry].root
    assert root.shape.nbytes == compiled.memory_analysis().output_size_in_bytes


def scan_of(length: int):
    def g(c0, xs):
        def body(c, x):
            with jax.named_scope("mine"):
                return c + jnp.sin(x), None            # the line hlo's source() must find
        return jax.lax.scan(body, c0, xs)[0]

    lines, first = inspect.getsourcelines(scan_of)
    sine_line = first + next(n for n, line in enumerate(lines) if "jnp.sin(x)" in line)
    return jax.jit(g).lower(jnp.ones(3), jnp.ones((length, 3))).compile(), sine_line


@pytest.mark.parametrize("length", [2, 7, 12])      # one trip: XLA removes the loop
def test_a_scan_compiles_to_a_while_of_its_length(length):
    compiled, line = scan_of(length)
    text = compiled.as_text()
    assert our_reading(text) == xla_reading(text)
    module = parse_module(text)
    (loop,) = [i for i in module.instructions if i.opcode == "while"]
    assert loop.known_trip_count == length
    body, condition = module.computations[loop.called("body")], module.computations[loop.called("condition")]
    assert condition.root.shape == Array("pred", ())
    assert body.root.opcode == "tuple" and len(body.root.operands) == len(arrays(loop.shape))
    assert (body.name, condition.name) == (loop.called_computations[0], loop.called_computations[1])
    # the sine: inside the body (through its fusion), named by its scope, traced back to this file's line
    (sine,) = [i for i in module.instructions if i.opcode == "sine"]
    assert "mine" in sine.metadata["op_name"]
    where = module.source(sine)
    assert (pathlib.Path(where.file).name, where.line) == (pathlib.Path(__file__).name, line)
    fusion = next(i for i in body if sine.computation in i.called_computations)
    assert fusion.opcode == "fusion" and fusion.called("calls") == sine.computation


def test_no_reader_imports_private_names_or_parses_instructions_itself():
    folder = pathlib.Path(shardlab.__file__).parent
    checked = 0
    for path in folder.rglob("*.py"):
        if path.name == "hlo.py":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "shardlab.programs.hlo":
                checked += 1
                assert not [a.name for a in node.names if a.name.startswith("_")], path
            # no module but hlo.py has a regex of its own for an instruction's head ("ROOT %name = ")
            # or a computation's ("ENTRY %name (...) -> ... {")
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                assert not re.search(r"\(\?:ROOT|\(\?:ENTRY|\^ENTRY|ENTRY\\s", node.value), (path, node.value)
    assert checked >= 5                       # collectives, loops, schedule, placements, traces read through it
