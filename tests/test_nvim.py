"""The Neovim plugin (editors/nvim) against the real language server, in a
headless Neovim.

One session opens the library's softmax, waits for the server to attach and
publish diagnostics, opens the generated code, asks for the code actions at a
body line, resolves and applies the first one, applies another through the
<leader>da mapping, breaks a line, and writes what it saw to a JSON file; the
tests check that file against the IR. More sessions check setup() without a
server, that the workspace's .venv/bin/dojo-lsp runs only when opted in, and
(on 0.11+) `vim.lsp.enable("dojo")` with the shipped lsp/dojo.lua alone.
`DOJO_TEST_NVIM` picks another Neovim binary (the plugin supports 0.7 and 0.11+).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import dojo_ir
import dojo_ir.moves
from agent.passes import PASSES
from agent.search import METHODS
from codegen.targets import TARGETS
from dojo_ir import library

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "editors" / "nvim"
NVIM = os.environ.get("DOJO_TEST_NVIM") or shutil.which("nvim")
TIMEOUT = 60  # seconds for a whole Neovim session
BODY_LINE = 11  # 1-based: `24576 512 m[{0}] max= x[{0},{1}]` in the library's softmax

pytestmark = pytest.mark.skipif(
    NVIM is None, reason="nvim is not on the PATH (the Debian package `neovim` provides it; `make install`)"
)


def _has_011() -> bool:
    version = subprocess.run([NVIM, "--version"], capture_output=True, text=True, timeout=30).stdout
    major, minor = version.split()[1].lstrip("v").split(".")[:2]
    return (int(major), int(minor)) >= (0, 11)

# The user's init: the plugin on the runtimepath and its setup(). Paths come
# in through the environment so that no quoting is needed.
INIT_LUA = r"""
vim.opt.runtimepath:prepend(vim.env.DOJO_TEST_PLUGIN)
vim.opt.swapfile = false
vim.g.mapleader = " "
-- Record every notification: the driver reports them.
_G.dojo_test_notes = {}
vim.notify = function(msg, level)
  table.insert(_G.dojo_test_notes, { msg = tostring(msg), level = level })
end
local cmd = nil -- the plugin's default
if vim.env.DOJO_TEST_CMD ~= "default" then
  cmd = vim.fn.json_decode(vim.env.DOJO_TEST_CMD)
end
require("dojo").setup({
  cmd = cmd,
  workspace_venv = vim.env.DOJO_TEST_VENV == "1",
  -- unranked quick-fixes: the first one is the innermost node's, whenever the agent is ready
  settings = { dojo = { measure = { automatic = false }, agent = { rankQuickFixes = false } } },
})
"""

# Shared by the drivers: run `body` protected, always write the JSON result and quit.
DRIVER_PRELUDE = r"""
local result = { errors = {} }
local function finish()
  result.notes = _G.dojo_test_notes
  result.errmsg = vim.v.errmsg
  vim.fn.writefile({ vim.fn.json_encode(result) }, vim.env.DOJO_TEST_OUT)
  vim.cmd("qa!")
end
local function wait(ms, what, cond)
  if not vim.wait(ms, cond, 20) then
    error(("timeout after %d ms waiting for %s"):format(ms, what), 0)
  end
end
-- buf_request_sync answers { [client_id] = { result = ..., error|err = ... } }
local function request(bufnr, client, method, params, ms)
  local responses, err = vim.lsp.buf_request_sync(bufnr, method, params, ms)
  if not responses then
    error(("%s: no answer within %d ms (%s)"):format(method, ms, tostring(err)), 0)
  end
  local response = responses[client.id]
  if not response then
    error(method .. ": no answer from the dojo client", 0)
  end
  local e = response.err or response.error
  if e then
    error(method .. " failed: " .. vim.inspect(e), 0)
  end
  return response.result
end
"""

def driver(body: str) -> str:
    """A Lua script that runs `body` in a protected call, records its error
    if it raises, and always writes the result and quits."""
    return (DRIVER_PRELUDE + "local ok, err = pcall(function()\n" + body
            + "end)\nif not ok then\n  table.insert(result.errors, tostring(err))\nend\nfinish()\n")


SESSION_LUA = driver(
    r"""
  local diagnostics = nil
  local publish = vim.lsp.handlers["textDocument/publishDiagnostics"]
  vim.lsp.handlers["textDocument/publishDiagnostics"] = function(e, res, ctx, config)
    diagnostics = res and res.diagnostics or {}
    return publish(e, res, ctx, config)
  end

  vim.cmd("edit " .. vim.fn.fnameescape(vim.env.DOJO_TEST_FILE))
  local bufnr = vim.api.nvim_get_current_buf()
  local dojo = require("dojo")
  result.filetype = vim.bo[bufnr].filetype

  wait(20000, "the dojo client to attach", function() return dojo.client(bufnr) ~= nil end)
  local client = dojo.client(bufnr)
  result.root_dir = client.config.root_dir
  result.cmd_cwd = client.config.cmd_cwd
  -- The server's working directory, where /proc tells it.
  for _, pid in ipairs(vim.api.nvim_get_proc_children(vim.fn.getpid())) do
    local ok_read, parts = pcall(vim.fn.readfile, "/proc/" .. pid .. "/cmdline", "b")
    local cmdline = ok_read and table.concat(parts, " ") or ""
    if cmdline:find("server.lsp", 1, true) then
      result.server_cwd = vim.loop.fs_readlink("/proc/" .. pid .. "/cwd")
    end
  end
  wait(20000, "textDocument/publishDiagnostics", function() return diagnostics ~= nil end)
  result.diagnostics = diagnostics
  -- The pickers offer the server's names: the commands' completion, and :DojoTune's vim.ui.select.
  result.completions = {
    targets = vim.fn.getcompletion("DojoGeneratedCode ", "cmdline"),
    methods = vim.fn.getcompletion("DojoTune ", "cmdline"),
    methods_h = vim.fn.getcompletion("DojoTune h", "cmdline"),
  }
  local select = vim.ui.select
  vim.ui.select = function(items, _, on_choice)
    result.tune_picker = items
    on_choice(nil)
  end
  dojo.tune(bufnr)
  vim.ui.select = select
  result.keymap = vim.fn.maparg("<leader>da", "n")
  result.commands = {
    benchmark = vim.fn.exists(":DojoBenchmark"),
    generated = vim.fn.exists(":DojoGeneratedCode"),
  }

  -- The plugin's own command: the generated code, opened by the plugin when the
  -- client does not support window/showDocument.
  local windows = #vim.api.nvim_list_wins()
  dojo.generated_code(bufnr)
  wait(30000, "dojo.showGeneratedCode", function() return dojo.last_generated_code ~= nil end)
  local generated = dojo.last_generated_code
  -- A new window (opened by the plugin), or the current one showing another
  -- buffer (window/showDocument, on Neovim versions that support it).
  wait(5000, "a window with the generated code", function()
    return #vim.api.nvim_list_wins() > windows or vim.api.nvim_get_current_buf() ~= bufnr
  end)
  local gen_buf = vim.api.nvim_get_current_buf()
  result.generated = {
    language = generated.language,
    uri = generated.uri,
    chars = type(generated.text) == "string" and #generated.text or 0,
    shown_lines = #vim.api.nvim_buf_get_lines(gen_buf, 0, -1, false),
  }
  vim.cmd("silent! only")
  vim.api.nvim_set_current_buf(bufnr)

  local line = tonumber(vim.env.DOJO_TEST_LINE) - 1
  local params = {
    textDocument = { uri = vim.uri_from_bufnr(bufnr) },
    range = { start = { line = line, character = 0 }, ["end"] = { line = line, character = 0 } },
    context = { diagnostics = {} },
  }
  local actions = request(bufnr, client, "textDocument/codeAction", params, 20000) or {}
  result.titles = {}
  result.kinds = {}
  for _, action in ipairs(actions) do
    table.insert(result.titles, action.title)
    table.insert(result.kinds, action.kind or "")
  end
  if #actions == 0 then
    error("no code actions at line " .. (line + 1), 0)
  end
  local action = actions[1]
  result.resolved = false
  if not action.edit then
    action = request(bufnr, client, "codeAction/resolve", action, 20000)
    result.resolved = true
  end
  if not action or not action.edit then
    error("the first code action has no edit, even after codeAction/resolve: " .. vim.inspect(action), 0)
  end
  result.applied_title = action.title
  vim.lsp.util.apply_workspace_edit(action.edit, client.offset_encoding or "utf-16")
  result.lines = vim.api.nvim_buf_get_lines(bufnr, 0, -1, false)

  -- The user's way: the <leader>da mapping (vim.lsp.buf.code_action), the first
  -- action picked in vim.ui.select; Neovim resolves and applies it.
  vim.api.nvim_win_set_cursor(0, { line + 1, 0 })
  vim.ui.select = function(items, opts, on_choice)
    local item = items[1]
    local action = item and (item.action or item[2])
    result.picked_title = action and action.title
    on_choice(item, 1)
  end
  local tick = vim.api.nvim_buf_get_changedtick(bufnr)
  vim.api.nvim_feedkeys(vim.g.mapleader .. "da", "mx", false)
  wait(20000, "the picked code action to change the buffer", function()
    return vim.api.nvim_buf_get_changedtick(bufnr) ~= tick
  end)
  result.picked_lines = vim.api.nvim_buf_get_lines(bufnr, 0, -1, false)

  -- An error as you type: the diagnostics follow the edit.
  diagnostics = nil
  local last = vim.api.nvim_buf_line_count(bufnr)
  vim.api.nvim_buf_set_lines(bufnr, last, last, false, { "8 y[{0},{3}] = 1" })
  wait(20000, "diagnostics of the broken line", function() return diagnostics ~= nil and #diagnostics > 0 end)
  result.error_line = last
  result.broken_diagnostics = diagnostics
"""
)

ATTACH_LUA = driver(
    r"""
  if vim.env.DOJO_TEST_TRUST and vim.secure and vim.secure.trust then
    -- what `:trust` does in the file's buffer (allowing needs the buffer; denying takes a path)
    local action, path = vim.env.DOJO_TEST_TRUST:match("^(%a+):(.*)$")
    if action == "allow" then
      vim.cmd("edit " .. vim.fn.fnameescape(path))
      vim.secure.trust({ action = "allow", bufnr = 0 })
      vim.cmd("bwipeout")
    else
      vim.secure.trust({ action = action, path = path })
    end
  end
  vim.cmd("edit " .. vim.fn.fnameescape(vim.env.DOJO_TEST_FILE))
  local bufnr = vim.api.nvim_get_current_buf()
  local dojo = require("dojo")
  wait(20000, "the dojo client to attach", function() return dojo.client(bufnr) ~= nil end)
  local client = dojo.client(bufnr)
  wait(20000, "the server to initialize", function() return client.server_capabilities ~= nil end)
  result.root_dir = client.config.root_dir
  result.cmd_cwd = client.config.cmd_cwd
"""
)

SETUP_LUA = driver(
    r"""
  if vim.env.DOJO_TEST_TRUST and vim.secure and vim.secure.trust then
    vim.secure.trust({ action = "deny", path = vim.env.DOJO_TEST_TRUST:match("^deny:(.*)$") })
  end
  vim.cmd("edit " .. vim.fn.fnameescape(vim.env.DOJO_TEST_FILE))
  result.filetype = vim.bo.filetype
  result.commentstring = vim.bo.commentstring
  result.commands = {
    benchmark = vim.fn.exists(":DojoBenchmark"),
    generated = vim.fn.exists(":DojoGeneratedCode"),
  }
  result.has_011 = vim.fn.has("nvim-0.11")
  vim.wait(200)
"""
)


def _run_nvim(tmp: Path, driver: str, kernel_file: Path, cmd: list[str] | None, init_lua: str = INIT_LUA,
              **env: str) -> dict:
    """Run one headless Neovim session; return the JSON its driver wrote."""
    init, script, out = tmp / "init.lua", tmp / "driver.lua", tmp / "result.json"
    init.write_text(init_lua)
    script.write_text(driver)
    home = tmp / "home"
    env = {
        **os.environ,
        "DOJO_TEST_PLUGIN": str(PLUGIN),
        "DOJO_TEST_CMD": json.dumps(cmd) if cmd is not None else "default",
        "DOJO_TEST_FILE": str(kernel_file),
        "DOJO_TEST_OUT": str(out),
        "DOJO_TEST_LINE": str(BODY_LINE),
        # Keep Neovim's state, logs (lsp.log) and shada out of the user's home.
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_DATA_HOME": str(home / "data"),
        "XDG_STATE_HOME": str(home / "state"),
        "XDG_CACHE_HOME": str(home / "cache"),
        **env,
    }
    try:
        proc = subprocess.run(
            [NVIM, "--headless", "--clean", "-u", str(init), "-c", f"luafile {script}"],
            env=env,
            cwd=tmp,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"headless Neovim did not finish within {TIMEOUT} s{_logs(home, e.stdout, e.stderr)}")
    if not out.exists():
        logs = _logs(home, proc.stdout, proc.stderr)
        pytest.fail(f"headless Neovim exited ({proc.returncode}) without writing its result{logs}")
    result = json.loads(out.read_text())
    result["_logs"] = _logs(home, proc.stdout, proc.stderr)
    return result


def _logs(home: Path, stdout, stderr) -> str:
    def text(s):
        return s.decode(errors="replace") if isinstance(s, bytes) else (s or "")

    parts = [f"\n--- nvim stdout ---\n{text(stdout)[-3000:]}", f"\n--- nvim stderr ---\n{text(stderr)[-3000:]}"]
    for log in sorted(home.rglob("lsp.log")):
        parts.append(f"\n--- {log.name} ---\n{log.read_text(errors='replace')[-6000:]}")
    return "".join(parts)


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("nvim")
    kernel_file = tmp / "softmax.dojo"
    text = library.load_text("softmax")
    kernel_file.write_text(text)
    result = _run_nvim(tmp, SESSION_LUA, kernel_file, [sys.executable, "-m", "server.lsp"])
    result["_text"] = text
    result["_dir"] = str(tmp)
    return result


def _need(session, *keys):
    """Fail with the session's errors and logs unless it got as far as `keys`."""
    missing = [key for key in keys if key not in session]
    if missing:
        pytest.fail(f"the Neovim session stopped before {', '.join(missing)}: {session['errors']}{session['_logs']}")


def test_code_action_is_listed_resolved_and_applied(session):
    _need(session, "titles", "lines")
    assert session["filetype"] == "dojo"
    assert session["diagnostics"] == [], "the library's softmax is valid"
    assert session["keymap"], "the buffer-local <leader>da mapping was not set on attach"

    titles = session["titles"]
    assert titles, "no code action at a body line"
    assert set(session["kinds"]) == {"quickfix"}
    names = set(dojo_ir.moves.KINDS)
    for title in titles:
        assert " — " in title, title
        move = title.split(" — ", 1)[1]
        assert move.split("(", 1)[0] in names, title

    move = session["applied_title"].split(" — ", 1)[1]
    expected = dojo_ir.to_text(dojo_ir.moves.apply(dojo_ir.load(session["_text"]), move))
    assert "\n".join(session["lines"]) + "\n" == expected, f"buffer after `{move}` differs from the IR's result"


def test_code_action_mapping_applies_the_picked_move(session):
    _need(session, "lines", "picked_title", "picked_lines")
    move = session["picked_title"].split(" — ", 1)[1]
    before = "\n".join(session["lines"]) + "\n"
    expected = dojo_ir.to_text(dojo_ir.moves.apply(dojo_ir.load(before), move))
    assert "\n".join(session["picked_lines"]) + "\n" == expected, f"buffer after `{move}` differs from the IR's result"


def test_diagnostics_follow_edits(session):
    _need(session, "broken_diagnostics")
    diagnostics = session["broken_diagnostics"]
    assert diagnostics, "no diagnostic for a broken line"
    assert {d["range"]["start"]["line"] for d in diagnostics} == {session["error_line"]}, diagnostics
    assert any("{3}" in d["message"] for d in diagnostics), diagnostics


def test_generated_code_command_opens_the_source(session):
    _need(session, "generated")
    generated = session["generated"]
    assert generated["chars"] > 0
    assert generated["shown_lines"] > 1, "the generated code was not shown in a window"


def test_the_pickers_offer_the_servers_vocabulary(session):
    _need(session, "completions")
    assert session["completions"]["targets"] == list(TARGETS)
    assert sorted(session["completions"]["methods"]) == sorted([*PASSES, *METHODS])
    assert session["completions"]["methods_h"] == ["heuristic"]
    assert session["tune_picker"] == session["completions"]["methods"]


def test_root_and_working_directory(session):
    _need(session, "root_dir")
    # tmp has neither .git nor pyproject.toml above it... unless the temporary
    # directory lives inside a repository, so only check that the file is under the root.
    assert Path(session["_dir"]).resolve().is_relative_to(Path(session["root_dir"]).resolve())
    assert session["cmd_cwd"] == session["root_dir"]
    if "server_cwd" in session:
        assert Path(session["server_cwd"]).resolve() == Path(session["root_dir"]).resolve()


def test_setup_loads_and_detects_the_filetype(tmp_path):
    kernel_file = tmp_path / "add.dojo"
    kernel_file.write_text(library.load_text("add"))
    # No server: the plugin must warn that it is missing, not fail.
    result = _run_nvim(tmp_path, SETUP_LUA, kernel_file, ["dojo-lsp-that-does-not-exist"])
    assert not result["errors"], f"{result['errors']}{result['_logs']}"
    assert result["errmsg"] == "", result["errmsg"]
    assert result["filetype"] == "dojo"
    assert result["commentstring"] == "# %s"
    assert result["commands"] == {"benchmark": 2, "generated": 2}
    notes = [n["msg"] for n in result["notes"]]
    assert any("dojo-lsp-that-does-not-exist" in n and "not found" in n for n in notes), notes


def _workspace_with_a_venv(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A workspace whose .venv/bin/dojo-lsp notes where it ran, then runs the server; the kernel
    file in it, and the note."""
    workspace = tmp_path / "ws"
    (workspace / ".venv" / "bin").mkdir(parents=True)
    (workspace / "pyproject.toml").write_text("")
    started = tmp_path / "started"
    launcher = workspace / ".venv" / "bin" / "dojo-lsp"
    launcher.write_text(f'#!/bin/sh\npwd > "{started}"\nexec "{sys.executable}" -m server.lsp "$@"\n')
    launcher.chmod(0o755)
    (workspace / "kernels").mkdir()
    kernel_file = workspace / "kernels" / "add.dojo"
    kernel_file.write_text(library.load_text("add"))
    return workspace, kernel_file, started


def test_the_workspace_venv_is_not_run_by_default(tmp_path):
    """Opening a folder must not run its programs: without `workspace_venv`,
    the workspace's .venv/bin/dojo-lsp is left alone."""
    _, kernel_file, started = _workspace_with_a_venv(tmp_path)
    result = _run_nvim(tmp_path, SETUP_LUA, kernel_file, None, PATH=os.defpath)
    assert not result["errors"], f"{result['errors']}{result['_logs']}"
    assert not started.exists(), "the workspace's .venv/bin/dojo-lsp ran without opting in"
    notes = [n["msg"] for n in result["notes"]]
    assert any("`dojo-lsp` not found" in n for n in notes), notes


def test_the_workspace_venv_runs_when_opted_in(tmp_path):
    """With `workspace_venv = true` (and the file trusted, where Neovim has
    vim.secure), the plugin starts the workspace's .venv/bin/dojo-lsp, found
    walking up from the file, in the directory that holds the `.venv`."""
    workspace, kernel_file, started = _workspace_with_a_venv(tmp_path)
    result = _run_nvim(tmp_path, ATTACH_LUA, kernel_file, None, DOJO_TEST_VENV="1",
                       DOJO_TEST_TRUST=f"allow:{workspace / '.venv' / 'bin' / 'dojo-lsp'}")
    assert not result["errors"], f"{result['errors']}{result['_logs']}"
    assert result["root_dir"] == str(workspace)
    assert started.read_text().strip() == str(workspace), "the launcher did not run in the workspace"


def test_a_workspace_venv_the_user_distrusts_is_not_run(tmp_path):
    """Where Neovim has vim.secure, opting in is not enough: a `.venv/bin/dojo-lsp`
    the user denied (`:trust ++deny`) is skipped with a warning."""
    if not _has_011():
        pytest.skip("tested where Neovim has vim.secure.trust with actions (0.11+)")
    workspace, kernel_file, started = _workspace_with_a_venv(tmp_path)
    exe = workspace / ".venv" / "bin" / "dojo-lsp"
    result = _run_nvim(tmp_path, SETUP_LUA, kernel_file, None, DOJO_TEST_VENV="1", DOJO_TEST_TRUST=f"deny:{exe}",
                       PATH=os.defpath)
    assert not result["errors"], f"{result['errors']}{result['_logs']}"
    assert not started.exists(), "a denied .venv/bin/dojo-lsp ran"
    notes = [n["msg"] for n in result["notes"]]
    assert any(str(exe) in n and "not trusted" in n for n in notes), notes


ENABLE_ONLY_LUA = r"""
vim.opt.runtimepath:prepend(vim.env.DOJO_TEST_PLUGIN)
vim.opt.swapfile = false
_G.dojo_test_notes = {}
vim.lsp.enable("dojo")
"""


def test_the_shipped_lsp_config_is_enough_on_0_11(tmp_path):
    """Neovim 0.11+: lsp/dojo.lua alone (no setup()) starts `dojo-lsp` from the
    PATH for a .dojo file, at the root its root_markers find."""
    if not _has_011():
        pytest.skip("vim.lsp.config and vim.lsp.enable are Neovim 0.11+")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "dojo-lsp").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m server.lsp "$@"\n')
    (bin_dir / "dojo-lsp").chmod(0o755)
    workspace = tmp_path / "ws"
    (workspace / "kernels").mkdir(parents=True)
    (workspace / ".git").mkdir()
    kernel_file = workspace / "kernels" / "add.dojo"
    kernel_file.write_text(library.load_text("add"))
    result = _run_nvim(tmp_path, ATTACH_LUA, kernel_file, None, ENABLE_ONLY_LUA,
                       PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', os.defpath)}")
    assert not result["errors"], f"{result['errors']}{result['_logs']}"
    assert result["root_dir"] == str(workspace)
