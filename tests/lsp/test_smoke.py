from pathlib import Path

from dojo_ir.library import KERNELS


async def test_diagnostics_and_actions(editor, tmp_path: Path):
    path = tmp_path / "add.dojo"
    path.write_text(KERNELS["add"].small())
    uri = editor.open(path)
    assert await editor.diagnostics(uri) == []
    lines = editor.texts[uri].splitlines()
    body = next(i for i, line in enumerate(lines) if line[:1].isdigit())
    actions = await editor.actions(uri, body)
    assert actions, "no action"
    print([a.title for a in actions])
    assert await editor.play(uri, actions[0])
    assert await editor.diagnostics(uri) == []
