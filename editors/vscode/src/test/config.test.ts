// Unit tests of the pure logic; run with `node --test out/test/` (no VS Code needed).
import { test } from "node:test";
import * as assert from "node:assert/strict";

import {
  DEFAULTS,
  initializationOptions,
  needsRestart,
  readSettings,
  resolveServerPath,
  expandPathSetting,
  serverArgs,
  settingScope,
} from "../config";

function getter(values: Record<string, unknown>) {
  return (key: string) => values[key];
}

test("unset settings give the defaults", () => {
  assert.deepEqual(readSettings(getter({})), { ...DEFAULTS });
});

test("settings are normalised: clamped, rounded, trimmed, wrong types replaced", () => {
  const s = readSettings(
    getter({
      maxTokens: 5000,
      debounceMs: -3,
      temperature: 0.7,
      multiline: "yes",
      enable: false,
      model: "  tiny ",
      serverPath: 42,
    }),
  );
  assert.equal(s.maxTokens, 1024);
  assert.equal(s.debounceMs, 0);
  assert.equal(s.temperature, 0.7);
  assert.equal(s.multiline, true, "a string is not a boolean: default kept");
  assert.equal(s.enable, false);
  assert.equal(readSettings(getter({ prepareCompletions: "no" })).prepareCompletions, true, "not a boolean: default kept");
  assert.equal(readSettings(getter({ prepareCompletions: false })).prepareCompletions, false);
  assert.equal(s.model, "tiny");
  assert.equal(s.serverPath, "");
  assert.equal(readSettings(getter({ maxTokens: 12.6 })).maxTokens, 13);
  assert.equal(readSettings(getter({ maxTokens: Number.NaN })).maxTokens, DEFAULTS.maxTokens);
});

test("initialization options carry the server's keys, leaving out empty model and socket", () => {
  const s = readSettings(getter({ maxTokens: 32, multiline: false, debounceMs: 10, temperature: 0.2, enable: false,
    prepareCompletions: false }));
  assert.deepEqual(initializationOptions(s), {
    maxTokens: 32,
    multiline: false,
    temperature: 0.2,
    debounceMs: 10,
    timeoutMs: 8000,
    device: "auto",
    exactKernels: false,
    enabled: false,
    prepareCompletions: false,
  });
  assert.equal(initializationOptions(readSettings(getter({ exactKernels: true }))).exactKernels, true);
  assert.equal(readSettings(getter({ exactKernels: "yes" })).exactKernels, false, "not a boolean: default kept");
  const d = readSettings(getter({ timeoutMs: 9e9, device: "cuda" }));
  assert.equal(initializationOptions(d).timeoutMs, 600000, "clamped to the server's bounds");
  assert.equal(initializationOptions(d).device, "cuda");
  assert.equal(readSettings(getter({ device: "gpu" })).device, "auto", "an unknown device: the default");
  assert.equal(readSettings(getter({ device: " cpu " })).device, "cpu", "stray spaces are not a typo");
  assert.equal(readSettings(getter({ temperature: 7 })).temperature, 7, "the daemon's range goes to 100");
  assert.equal(readSettings(getter({ temperature: 500 })).temperature, 100);
  const t = readSettings(getter({ model: "tiny", socket: "/tmp/x.sock" }));
  const opts = initializationOptions(t);
  assert.equal(opts.model, "tiny");
  assert.equal(opts.socket, "/tmp/x.sock");
  assert.equal(opts.enabled, true);
});

test("server arguments", () => {
  assert.deepEqual(serverArgs(readSettings(getter({}))), ["lsp"]);
  assert.deepEqual(serverArgs(readSettings(getter({ model: "tiny", socket: "/s" }))), [
    "lsp",
    "--model",
    "tiny",
    "--socket",
    "/s",
  ]);
});

test("only serverPath, model and socket need a restart", () => {
  const a = readSettings(getter({}));
  assert.equal(needsRestart(a, { ...a, maxTokens: 3, enable: false, debounceMs: 1 }), false);
  assert.equal(needsRestart(a, { ...a, model: "tiny" }), true);
  assert.equal(needsRestart(a, { ...a, socket: "/s" }), true);
  assert.equal(needsRestart(a, { ...a, serverPath: "/x" }), true);
});

function fakeFs(files: string[]) {
  const set = new Set(files);
  return { platform: "linux", isExecutable: (p: string) => set.has(p) };
}

test("server path: explicit setting wins over the workspace venv and PATH", () => {
  const plat = fakeFs(["/opt/ngramd", "/ws/.venv/bin/ngramd", "/usr/bin/ngramd"]);
  assert.deepEqual(resolveServerPath("/opt/ngramd", ["/ws"], { PATH: "/usr/bin" }, plat), {
    ok: true,
    path: "/opt/ngramd",
    source: "setting",
  });
});

test("server path: a wrong explicit setting is an error, not a silent fallback", () => {
  const plat = fakeFs(["/ws/.venv/bin/ngramd", "/usr/bin/ngramd"]);
  const r = resolveServerPath("/nope/ngramd", ["/ws"], { PATH: "/usr/bin" }, plat);
  assert.equal(r.ok, false);
  assert.match((r as { error: string }).error, /\/nope\/ngramd/);
});

test("server path: ~, ${workspaceFolder} and relative settings", () => {
  const plat = fakeFs(["/home/u/bin/ngramd", "/ws/tools/ngramd"]);
  const env = { HOME: "/home/u", PATH: "" };
  assert.equal((resolveServerPath("~/bin/ngramd", [], env, plat) as { path: string }).path, "/home/u/bin/ngramd");
  assert.equal(
    (resolveServerPath("${workspaceFolder}/tools/ngramd", ["/ws"], env, plat) as { path: string }).path,
    "/ws/tools/ngramd",
  );
  assert.equal((resolveServerPath("tools/ngramd", ["/ws"], env, plat) as { path: string }).path, "/ws/tools/ngramd");
  assert.equal(resolveServerPath("tools/ngramd", [], env, plat).ok, false);
  assert.equal(resolveServerPath("${workspaceFolder}/tools/ngramd", [], env, plat).ok, false);
});

test("server path: ${workspaceFolder:name} is the folder of that name, as in VS Code's own variables", () => {
  const plat = fakeFs(["/ws/tools/bin/ngramd", "/ws/api/bin/ngramd"]);
  const env = { HOME: "/home/u", PATH: "" };
  // folders given as paths are named after their last component (VS Code's default name)
  assert.deepEqual(resolveServerPath("${workspaceFolder:tools}/bin/ngramd", ["/ws/api", "/ws/tools"], env, plat), {
    ok: true,
    path: "/ws/tools/bin/ngramd",
    source: "setting",
  });
  // ${workspaceFolder} stays the first folder
  assert.equal((resolveServerPath("${workspaceFolder}/bin/ngramd", ["/ws/api", "/ws/tools"], env, plat) as { path: string }).path,
    "/ws/api/bin/ngramd");
});

test("server path: ${workspaceFolder:name} uses the folder's own name, not its directory's", () => {
  const plat = fakeFs(["/src/backend-v2/bin/ngramd"]);
  const folders = [{ name: "frontend", path: "/src/web" }, { name: "backend", path: "/src/backend-v2" }];
  assert.equal((resolveServerPath("${workspaceFolder:backend}/bin/ngramd", folders, {}, plat) as { path: string }).path,
    "/src/backend-v2/bin/ngramd");
  assert.equal(resolveServerPath("${workspaceFolder:backend-v2}/bin/ngramd", folders, {}, plat).ok, false);
});

test("server path: ${workspaceFolder:name} naming no open folder is a clear error, not another path", () => {
  const plat = fakeFs(["/ws/api/bin/ngramd", "/usr/bin/ngramd"]);
  const r = resolveServerPath("${workspaceFolder:nope}/bin/ngramd", ["/ws/api", "/ws/tools"], { PATH: "/usr/bin" }, plat);
  assert.equal(r.ok, false);
  const error = (r as { error: string }).error;
  assert.match(error, /no workspace folder is named "nope"/);
  assert.match(error, /open folders: "api", "tools"/);
  assert.match(error, /\$\{workspaceFolder:nope\}\/bin\/ngramd/, "the setting as written");
  const none = resolveServerPath("${workspaceFolder:api}/bin/ngramd", [], {}, plat);
  assert.equal(none.ok, false);
  assert.match((none as { error: string }).error, /no workspace folder is named "api" \(no folder is open\)/);
});

test("a setting is written to the most specific scope that sets it (that value decides)", () => {
  assert.equal(settingScope(undefined), "global");
  assert.equal(settingScope({ globalValue: false }), "global");
  assert.equal(settingScope({ globalValue: false, workspaceValue: true }), "workspace");
  assert.equal(settingScope({ workspaceValue: true, workspaceFolderValue: false }), "workspaceFolder");
  assert.equal(settingScope({ workspaceFolderValue: true }), "workspaceFolder");
});

test("server path: workspace .venv before PATH, first folder that has one", () => {
  const plat = fakeFs(["/b/.venv/bin/ngramd", "/usr/bin/ngramd"]);
  assert.deepEqual(resolveServerPath("", ["/a", "/b"], { PATH: "/usr/bin" }, plat), {
    ok: true,
    path: "/b/.venv/bin/ngramd",
    source: "workspace",
  });
});

test("server path: PATH in order, relative PATH entries ignored", () => {
  const plat = fakeFs(["/second/ngramd", "/third/ngramd", "rel/ngramd"]);
  assert.deepEqual(resolveServerPath("", [], { PATH: "rel::/first:/second:/third" }, plat), {
    ok: true,
    path: "/second/ngramd",
    source: "path",
  });
});

test("server path: nothing found gives an actionable error", () => {
  const r = resolveServerPath("", ["/ws"], { PATH: "/usr/bin" }, fakeFs([]));
  assert.equal(r.ok, false);
  assert.match((r as { error: string }).error, /ngramd\.serverPath/);
});

test("server path on Windows: Scripts\\ngramd.exe and ; in PATH", () => {
  const plat = { platform: "win32", isExecutable: (p: string) => p === "C:\\ws\\.venv\\Scripts\\ngramd.exe" };
  assert.deepEqual(resolveServerPath("", ["C:\\ws"], { PATH: "C:\\bin;D:\\x" }, plat), {
    ok: true,
    path: "C:\\ws\\.venv\\Scripts\\ngramd.exe",
    source: "workspace",
  });
  const plat2 = { platform: "win32", isExecutable: (p: string) => p === "D:\\x\\ngramd.exe" };
  assert.equal((resolveServerPath("", [], { PATH: "C:\\bin;D:\\x" }, plat2) as { path: string }).path, "D:\\x\\ngramd.exe");
});

test("model and socket paths: variables and ~ expanded, a relative path in the first folder made absolute", () => {
  const folders = [{ name: "api", path: "/ws/api" }, { name: "ml", path: "/ws/ml" }];
  const env = { HOME: "/home/u" };
  const exists = (p: string) => p === "/ws/api/models/x.gguf";
  const expand = (s: string) => expandPathSetting(s, folders, env, exists, "ngramd.model");
  assert.deepEqual(expand(""), { ok: true, value: "" });
  assert.deepEqual(expand("${workspaceFolder:ml}/m.gguf"), { ok: true, value: "/ws/ml/m.gguf" });
  assert.deepEqual(expand("~/models/m.gguf"), { ok: true, value: "/home/u/models/m.gguf" });
  assert.deepEqual(expand("models/x.gguf"), { ok: true, value: "/ws/api/models/x.gguf" });
  assert.deepEqual(expand("HuggingFaceTB/SmolLM2-360M"), { ok: true, value: "HuggingFaceTB/SmolLM2-360M" },
    "no such path in the folder: a model id, given as written");
  assert.deepEqual(expand("tiny"), { ok: true, value: "tiny" });
  const wrong = expand("${workspaceFolder:nope}/m.gguf");
  assert.equal(wrong.ok, false);
  assert.match((wrong as { error: string }).error, /ngramd\.model uses \$\{workspaceFolder:nope\}/);
  assert.deepEqual(expandPathSetting("x.gguf", [], env, () => true, "ngramd.model"), { ok: true, value: "x.gguf" });
});
