// Loads the compiled extension with a stand-in `vscode` module: every property is a
// callable, constructible stub. This proves the module graph (vscode-languageclient/node
// included) resolves and the entry points exist; it does not run VS Code.
import { test } from "node:test";
import * as assert from "node:assert/strict";
import Module = require("node:module");

function stub(name: string): unknown {
  const fn = function () {
    return stub(`${name}()`);
  };
  return new Proxy(fn, {
    get: (_t, prop) => (prop === Symbol.toPrimitive ? () => name : prop === "then" ? undefined : stub(`${name}.${String(prop)}`)),
    apply: () => stub(`${name}()`),
    construct: () => stub(`new ${name}`) as object,
  });
}

test("out/extension.js loads beside vscode-languageclient and exports activate/deactivate", () => {
  const mod = Module as unknown as { _load: (request: string, ...rest: unknown[]) => unknown };
  const original = mod._load;
  mod._load = function (request: string, ...rest: unknown[]) {
    return request === "vscode" ? stub("vscode") : original.call(this, request, ...rest);
  };
  try {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const ext = require("../extension");
    assert.equal(typeof ext.activate, "function");
    assert.equal(typeof ext.deactivate, "function");
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const lc = require("vscode-languageclient/node");
    assert.equal(typeof lc.LanguageClient, "function");
    assert.equal(typeof lc.LanguageClient.prototype.registerProposedFeatures, "function");
  } finally {
    mod._load = original;
  }
});
