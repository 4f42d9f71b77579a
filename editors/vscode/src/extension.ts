// The PerfDojo extension: starts the `dojo-lsp` language server for `.dojo`
// files. Everything the user sees (diagnostics, quick-fixes with the legal
// moves, hovers with the generated code, the inlay hint with the measured
// time, the commands) comes from the server; this file only finds and starts
// it, fills in the active document for commands run from the palette, and
// restarts the server when its settings change.
//
// Opening a folder must not run its programs, nor let its settings choose
// where data goes: the workspace's own server (.venv) is used only in a
// trusted workspace, and the settings that choose the runner, its token file
// and the agent are sent from the user's settings only (see docs/editor.md).

import * as fs from "node:fs";
import * as path from "node:path";
import * as vscode from "vscode";
import {
  type Executable,
  LanguageClient,
  type LanguageClientOptions,
  type ServerOptions,
  State,
} from "vscode-languageclient/node";

const LANGUAGE_ID = "dojo";
const CLIENT_ID = "dojo";
const CLIENT_NAME = "PerfDojo Language Server";

// The server's commands (dojo.benchmark, dojo.showGeneratedCode, dojo.applyMoves, dojo.tune,
// dojo.agent.continue) are registered by the language
// client from the server's executeCommandProvider; package.json only gives
// them titles. Those acting on a document take its uri first: invoked from the
// command palette they get no arguments, and the active dojo editor's uri is
// filled in (see the executeCommand middleware).
const COMMAND_PREFIX = "dojo.";

/** The names the server offers for pickers (`dojo.vocabulary`, see docs/editor.md). */
interface Vocabulary {
  targets: string[];
  tuneMethods: string[];
}

let client: LanguageClient | undefined;
let outputChannel: vscode.OutputChannel | undefined;
let traceChannel: vscode.OutputChannel | undefined;

/** How the server is started, and which setting chose it (for error messages). */
interface ServerCommand {
  command: string;
  args: string[];
  cwd?: string;
  source: string;
}

function firstWorkspaceFolder(): string | undefined {
  const folders = vscode.workspace.workspaceFolders;
  if (!folders || folders.length === 0) {
    return undefined;
  }
  const folder = folders.find((f) => f.uri.scheme === "file") ?? folders[0];
  return folder.uri.scheme === "file" ? folder.uri.fsPath : undefined;
}

/** Expands `~`, and `${workspaceFolder}` and a path relative to the first folder when one is given. */
function expandPath(value: string, folder: string | undefined): string {
  let p = value.trim();
  if (p === "~" || p.startsWith("~/")) {
    p = path.join(process.env.HOME ?? process.env.USERPROFILE ?? "~", p.slice(1));
  }
  if (folder) {
    p = p.replace(/\$\{workspaceFolder\}/g, folder);
    // Only paths with a directory part are relative to the folder; a bare
    // name ("python3") is looked up on the PATH.
    if (!path.isAbsolute(p) && (p.includes("/") || p.includes("\\"))) {
      p = path.join(folder, p);
    }
  }
  return p;
}

function venvServer(folder: string): string | undefined {
  const candidates =
    process.platform === "win32"
      ? [path.join(folder, ".venv", "Scripts", "dojo-lsp.exe")]
      : [path.join(folder, ".venv", "bin", "dojo-lsp")];
  return candidates.find((c) => fs.existsSync(c));
}

/**
 * `dojo.server.path`, else `dojo.server.python -m server.lsp`, else `.venv/bin/dojo-lsp`, else `dojo-lsp`.
 * In a workspace that is not trusted (VS Code then answers the server settings from the user's
 * settings only), nothing of the folder is run: no `.venv`, no path resolved against the folder, and
 * the server does not start in it (`python -m` would import the folder's modules first). `outside`
 * is a directory of the extension's own to start it in instead.
 */
export function resolveServerCommand(outside: string): ServerCommand {
  const config = vscode.workspace.getConfiguration("dojo");
  const trusted = vscode.workspace.isTrusted;
  const workspace = firstWorkspaceFolder();
  const folder = trusted ? workspace : undefined;
  const cwd = folder ?? outside;
  const explicit = (config.get<string>("server.path") ?? "").trim();
  if (explicit) {
    return { command: expandPath(explicit, folder), args: [], cwd, source: "the setting dojo.server.path" };
  }
  const python = (config.get<string>("server.python") ?? "").trim();
  if (python) {
    return {
      command: expandPath(python, folder),
      args: ["-m", "server.lsp"],
      cwd,
      source: "the setting dojo.server.python",
    };
  }
  if (folder) {
    const venv = venvServer(folder);
    if (venv) {
      return { command: venv, args: [], cwd, source: "the workspace's .venv" };
    }
  }
  const untrusted = workspace && !trusted ? " (the workspace is not trusted: its .venv is not used)" : "";
  return { command: "dojo-lsp", args: [], cwd, source: `the PATH${untrusted}` };
}

/** A setting's value in the user's settings (else its default), whatever a workspace says. */
function usersValue<T>(config: vscode.WorkspaceConfiguration, key: string): T | undefined {
  const values = config.inspect<T>(key);
  return values?.globalValue ?? values?.defaultValue;
}

/**
 * The initializationOptions (nested keys; see server/lsp/settings.py): the settings the server takes
 * from the user only, from the user's settings, and those of what it does on its own from the start
 * (measuring, rating the moves). The commands' defaults it asks for with workspace/configuration.
 */
function serverSettings(): Record<string, unknown> {
  const config = vscode.workspace.getConfiguration("dojo");
  return {
    target: config.get<string>("target"),
    runner: { url: usersValue<string>(config, "runner.url"), tokenFile: usersValue<string>(config, "runner.tokenFile") },
    repetitions: config.get<number>("repetitions"),
    measure: { automatic: config.get<boolean>("measure.automatic") },
    agent: {
      checkpoint: usersValue<string>(config, "agent.checkpoint"),
      rankQuickFixes: config.get<boolean>("agent.rankQuickFixes"),
    },
  };
}

/** The settings that take effect when the server starts: a change restarts it. */
const START_SETTINGS = ["dojo.server", "dojo.runner", "dojo.agent.checkpoint"];

function describe(server: ServerCommand): string {
  return [server.command, ...server.args].join(" ");
}

function activeDojoUri(): string | undefined {
  const editor = vscode.window.activeTextEditor;
  if (editor && editor.document.languageId === LANGUAGE_ID) {
    return editor.document.uri.toString();
  }
  // A webview or output panel may have the focus: take a visible dojo editor.
  const visible = vscode.window.visibleTextEditors.find((e) => e.document.languageId === LANGUAGE_ID);
  return visible?.document.uri.toString();
}

async function showStartError(server: ServerCommand, error: unknown): Promise<void> {
  const detail = error instanceof Error ? error.message : String(error);
  const message =
    `PerfDojo: could not start the language server with \`${describe(server)}\` (from ${server.source}): ${detail}. ` +
    "Run `make install` in the PerfDojo repository to create .venv/bin/dojo-lsp, " +
    "or set `dojo.server.path` to the dojo-lsp executable, " +
    "or `dojo.server.python` to a Python interpreter with PerfDojo installed.";
  outputChannel?.appendLine(message);
  const choice = await vscode.window.showErrorMessage(message, "Open Settings", "Show Output");
  if (choice === "Open Settings") {
    await vscode.commands.executeCommand("workbench.action.openSettings", "dojo.server");
  } else if (choice === "Show Output") {
    outputChannel?.show(true);
  }
}

async function startClient(outside: string): Promise<void> {
  await fs.promises.mkdir(outside, { recursive: true });
  const server = resolveServerCommand(outside);
  // No `transport`: the server speaks over its stdin and stdout all the same,
  // and the client does not append `--stdio` to the command line.
  const executable: Executable = {
    command: server.command,
    args: server.args,
    options: server.cwd ? { cwd: server.cwd } : {},
  };
  const serverOptions: ServerOptions = { run: executable, debug: executable };

  outputChannel ??= vscode.window.createOutputChannel(CLIENT_NAME);
  traceChannel ??= vscode.window.createOutputChannel(`${CLIENT_NAME} Trace`);
  outputChannel.appendLine(`Starting ${describe(server)} (from ${server.source})`);

  const clientOptions: LanguageClientOptions = {
    documentSelector: [{ language: LANGUAGE_ID }],
    // The server reads the user's choice of runner, token file and agent as
    // initializationOptions at start, and the rest of the `dojo` section
    // through workspace/configuration whenever it changes.
    initializationOptions: () => serverSettings(),
    synchronize: { configurationSection: "dojo" },
    outputChannel,
    traceOutputChannel: traceChannel,
    middleware: {
      executeCommand: async (command, args, next) => {
        if ((args === undefined || args.length === 0) && command.startsWith(COMMAND_PREFIX)) {
          const uri = activeDojoUri();
          if (uri !== undefined) {
            args = [uri];
          }
        }
        if (command === "dojo.tune" && args?.length === 1) {
          // From the palette: the method from a picker of the server's methods.
          const method = await pickTuneMethod();
          if (method === undefined) {
            return undefined;
          }
          args = [args[0], { method }];
        }
        return next(command, args ?? []);
      },
    },
  };

  const newClient = new LanguageClient(CLIENT_ID, CLIENT_NAME, serverOptions, clientOptions);
  client = newClient;
  try {
    await newClient.start();
  } catch (error) {
    if (client === newClient) {
      client = undefined;
    }
    // A client that failed to start still holds its registrations.
    try {
      await newClient.dispose();
    } catch {
      // already stopped
    }
    // Not awaited: the notification stays until dismissed, and a restart
    // (a corrected setting) must not wait for it.
    void showStartError(server, error);
  }
}

async function pickTuneMethod(): Promise<string | undefined> {
  if (!client) {
    return undefined;
  }
  const vocabulary: Vocabulary = await client.sendRequest("workspace/executeCommand", {
    command: "dojo.vocabulary",
    arguments: [],
  });
  return vscode.window.showQuickPick(vocabulary.tuneMethods, {
    title: "PerfDojo: Tune",
    placeHolder: "the search method (the first is usually best)",
  });
}

async function stopClient(): Promise<void> {
  const old = client;
  client = undefined;
  if (!old) {
    return;
  }
  try {
    if (old.state !== State.Stopped) {
      await old.stop(2000);
    }
  } catch (error) {
    outputChannel?.appendLine(`Stopping the server: ${error instanceof Error ? error.message : String(error)}`);
  }
  try {
    await old.dispose();
  } catch {
    // already disposed
  }
}

let restarting: Promise<void> = Promise.resolve();

function restart(outside: string): Promise<void> {
  // Serialize restarts so that two quick setting changes never leave two servers.
  restarting = restarting.then(async () => {
    await stopClient();
    await startClient(outside);
  });
  return restarting;
}

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const outside = context.globalStorageUri.fsPath;
  context.subscriptions.push(
    vscode.commands.registerCommand("dojo.restartServer", () => restart(outside)),
    vscode.workspace.onDidChangeConfiguration((event) => {
      if (START_SETTINGS.some((section) => event.affectsConfiguration(section))) {
        void restart(outside);
      }
    }),
    // Trusted now: the workspace's own server and settings may be used.
    vscode.workspace.onDidGrantWorkspaceTrust(() => void restart(outside)),
    { dispose: () => void stopClient() },
  );
  await restart(outside);
}

export async function deactivate(): Promise<void> {
  await restarting.catch(() => undefined);
  await stopClient();
  outputChannel?.dispose();
  traceChannel?.dispose();
  outputChannel = undefined;
  traceChannel = undefined;
}
