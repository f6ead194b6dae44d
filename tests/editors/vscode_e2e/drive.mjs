// Drives a real VS Code (code-server in headless Chromium) through what a user of the
// ngramd extension does; run by tests/editors/test_vscode_real.py, which starts code-server
// with the extension installed and checks the report this script writes.
//
//   node drive.mjs   with the environment:
//     E2E_URL        code-server's address, a folder opened (http://127.0.0.1:PORT/?folder=...)
//     E2E_FILE       the Python file to edit (inside that folder)
//     E2E_TYPE       the text typed at the end of the file
//     E2E_SHOTS      folder for the PNG screenshots of each step
//     E2E_REPORT     JSON file written with what each step saw
//     E2E_CHROMIUM   the browser (default /usr/bin/chromium)
//     E2E_PROFILE    Chromium's profile folder
//     E2E_GHOST_MS   how long to wait for ghost text once the daemon runs (default 120000)
//     E2E_START_MS   how long to wait for the daemon's first start (default 300000)
//
// Steps: open the file, type at its end, wait for ghost text, close VS Code's word list
// (Escape) when it is open, accept with Tab, save; select the first function and run the
// light bulb's "Rewrite selection with ngramd" with an instruction, wait for the text to
// change, save; read the status bar item. The report holds the file's text after each save.

import fs from "node:fs";
import path from "node:path";
import puppeteer from "puppeteer-core";

const env = (name, fallback) => {
  const v = process.env[name] ?? fallback;
  if (v === undefined) throw new Error(`${name} is not set`);
  return v;
};
const url = env("E2E_URL");
const file = env("E2E_FILE");
const typed = env("E2E_TYPE");
const shots = env("E2E_SHOTS");
const reportPath = env("E2E_REPORT");
const ghostMs = Number(env("E2E_GHOST_MS", "120000"));
const startMs = Number(env("E2E_START_MS", "300000"));
const STEP_MS = 60000; // VS Code's own UI (workbench, quick open, menus) on a busy 2-core machine
const REWRITE_MS = 180000;

const report = { steps: [], shots: [] };
const mod = process.platform === "darwin" ? "Meta" : "Control";
fs.mkdirSync(shots, { recursive: true });

function log(msg) {
  process.stdout.write(`[drive ${new Date().toISOString().slice(11, 19)}] ${msg}\n`);
}

function writeReport() {
  fs.writeFileSync(reportPath, JSON.stringify(report, null, 2));
}

async function shot(page, name) {
  const p = path.join(shots, `${String(report.shots.length + 1).padStart(2, "0")}-${name}.png`);
  await page.screenshot({ path: p });
  report.shots.push(p);
  log(`screenshot ${p}`);
}

async function step(name, fn) {
  log(`step: ${name}`);
  const value = await fn();
  report.steps.push({ name, ...(value && typeof value === "object" ? value : {}) });
  writeReport();
  return value;
}

async function chord(page, ...keys) {
  for (const k of keys) await page.keyboard.down(k);
  for (const k of [...keys].reverse()) await page.keyboard.up(k);
}

// The text of the visible editor's lines (ghost text left out), top to bottom.
async function editorText(page) {
  return page.evaluate(() => {
    const editor = document.querySelector(".editor-instance .monaco-editor");
    if (!editor) return null;
    const lines = [...editor.querySelectorAll(".view-lines .view-line")].map((el) => {
      const copy = el.cloneNode(true);
      copy.querySelectorAll('[class*="ghost-text"]').forEach((g) => g.remove());
      return { top: parseFloat(el.style.top || "0"), text: copy.textContent.replace(/\u00a0/g, " ") };
    });
    lines.sort((a, b) => a.top - b.top);
    return lines.map((l) => l.text).join("\n");
  });
}

async function ghostText(page) {
  return page.evaluate(() => {
    // the outermost ghost-text elements (the first line's inline part, then any lines below)
    const els = [...document.querySelectorAll('.monaco-editor [class*="ghost-text"]')]
      .filter((e) => !e.parentElement.closest('[class*="ghost-text"]'));
    const text = els.map((e) => e.textContent).join("").replace(/\u00a0/g, " ");
    return els.length && text.trim() ? text : null;
  });
}

async function save(page) {
  const before = fs.statSync(file).mtimeMs;
  await chord(page, mod, "s");
  await page.waitForFunction(
    () => !document.querySelector(".tab.active.dirty, .tabs-container .tab.active.dirty"),
    { timeout: STEP_MS });
  // the tab is clean once the write finished; the file on disk says so too
  const deadline = Date.now() + STEP_MS;
  while (fs.statSync(file).mtimeMs === before && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 100));
  }
  return fs.readFileSync(file, "utf8");
}

async function statusItem(page) {
  return page.evaluate(() => {
    const item = [...document.querySelectorAll(".statusbar-item")].find((el) =>
      /ngramd/.test(el.textContent || ""));
    if (!item) return null;
    const icons = [...item.querySelectorAll('[class*="codicon-"]')].map((i) =>
      [...i.classList].find((c) => c.startsWith("codicon-") && c !== "codicon-modifier-spin"));
    return {
      text: item.textContent.trim(),
      icons,
      ariaLabel: item.getAttribute("aria-label") || item.querySelector("[aria-label]")?.getAttribute("aria-label") || "",
    };
  });
}

async function main() {
  const browser = await puppeteer.launch({
    executablePath: env("E2E_CHROMIUM", "/usr/bin/chromium"),
    headless: true,
    userDataDir: env("E2E_PROFILE"),
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,800",
           "--no-first-run", "--no-default-browser-check"],
    defaultViewport: { width: 1280, height: 800 },
    protocolTimeout: 300000,
  });
  const page = await browser.newPage();
  page.on("pageerror", (e) => log(`page error: ${e.message.split("\n")[0]}`));
  try {
    await step("open the workbench", async () => {
      await page.goto(url, { waitUntil: "domcontentloaded", timeout: STEP_MS });
      await page.waitForSelector(".monaco-workbench .part.statusbar", { timeout: STEP_MS * 2 });
    });

    await step("open the file", async () => {
      const name = path.basename(file);
      // Quick Open; retried: the first keystrokes may come before the workbench's keybindings
      const deadline = Date.now() + STEP_MS * 2;
      for (;;) {
        await chord(page, mod, "p");
        try {
          await page.waitForSelector(".quick-input-widget input", { visible: true, timeout: 5000 });
          break;
        } catch (e) {
          if (Date.now() > deadline) throw e;
        }
      }
      await page.keyboard.type(name, { delay: 20 });
      await page.waitForFunction(
        (n) => [...document.querySelectorAll(".quick-input-list .monaco-list-row")].some((r) => r.textContent.includes(n)),
        { timeout: STEP_MS }, name);
      await page.keyboard.press("Enter");
      await page.waitForFunction(
        (n) => [...document.querySelectorAll(".tabs-container .tab.active")].some((t) => t.textContent.includes(n)),
        { timeout: STEP_MS }, name);
      await page.waitForSelector(".editor-instance .monaco-editor .view-lines .view-line", { timeout: STEP_MS });
      await page.click(".editor-instance .monaco-editor .view-lines");
      await shot(page, "opened");
      return { text: await editorText(page) };
    });

    const ghost = await step("type and see ghost text", async () => {
      await chord(page, mod, "End");
      // all but the last character; the first completion starts the daemon, whose first start
      // loads the model and times its passes (minutes on a busy machine); the last character
      // is typed once it runs, and the ghost text's clock starts then
      await page.keyboard.type(typed.slice(0, -1), { delay: 40 });
      await shot(page, "typed");
      const started = Date.now();
      await page.waitForFunction(() => [...document.querySelectorAll(".statusbar-item")]
        .some((el) => /ngramd/.test(el.textContent || "") && el.querySelector(".codicon-sparkle")),
        { timeout: startMs, polling: 250 });
      const startWaitMs = Date.now() - started;
      await page.keyboard.type(typed.slice(-1));
      const t0 = Date.now();
      await page.waitForFunction(() => {
        const els = [...document.querySelectorAll('.monaco-editor [class*="ghost-text"]')];
        return els.some((e) => e.textContent.replace(/\u00a0/g, " ").trim().length > 0);
      }, { timeout: ghostMs, polling: 100 });
      const waitedMs = Date.now() - t0;
      const text = await ghostText(page);
      const suggestOpen = await page.$eval("body", () => !!document.querySelector(".editor-widget.suggest-widget.visible"));
      await shot(page, "ghost-text");
      return { ghost: text, waitedMs, startWaitMs, suggestOpen };
    });

    await step("accept with Tab", async () => {
      if (ghost.suggestOpen) {
        // VS Code's word list takes the first Tab: close it, the ghost text stays
        await page.keyboard.press("Escape");
        await page.waitForFunction(() => !document.querySelector(".editor-widget.suggest-widget.visible"),
          { timeout: STEP_MS });
      }
      await page.waitForFunction(() => [...document.querySelectorAll('.monaco-editor [class*="ghost-text"]')]
        .some((e) => e.textContent.trim().length > 0), { timeout: ghostMs, polling: 100 });
      const shown = await ghostText(page);
      await page.keyboard.press("Tab");
      await page.waitForFunction(() => ![...document.querySelectorAll('.monaco-editor [class*="ghost-text"]')]
        .some((e) => e.textContent.trim().length > 0), { timeout: STEP_MS });
      await shot(page, "accepted");
      const saved = await save(page);
      return { shown, saved };
    });

    await step("rewrite the first function from the light bulb", async () => {
      const before = fs.readFileSync(file, "utf8");
      // select the first function: its three lines from the top of the file
      await chord(page, mod, "Home");
      const firstDef = before.split("\n").findIndex((l) => l.startsWith("def "));
      for (let i = 0; i < firstDef; i++) await page.keyboard.press("ArrowDown");
      await page.keyboard.down("Shift");
      for (let i = 0; i < 3; i++) await page.keyboard.press("ArrowDown");
      await page.keyboard.up("Shift");
      const shownBefore = await editorText(page);
      // Ctrl+. opens the code actions of the selection; retried until ngramd's is listed
      const deadline = Date.now() + STEP_MS * 2;
      for (;;) {
        await chord(page, mod, ".");
        try {
          await page.waitForFunction(() => [...document.querySelectorAll(".action-widget .monaco-list-row")]
            .some((r) => /Rewrite selection with ngramd/.test(r.textContent)), { timeout: 10000 });
          break;
        } catch (e) {
          if (Date.now() > deadline) throw e;
          await page.keyboard.press("Escape");
        }
      }
      await shot(page, "code-action-menu");
      const rows = await page.$$(".action-widget .monaco-list-row");
      let clicked = false;
      for (const r of rows) {
        if (/Rewrite selection with ngramd/.test(await r.evaluate((el) => el.textContent))) {
          await r.click();
          clicked = true;
          break;
        }
      }
      if (!clicked) throw new Error("the rewrite action vanished from the menu");
      await page.waitForSelector(".quick-input-widget input", { visible: true, timeout: STEP_MS });
      await page.keyboard.type("Add type hints.", { delay: 20 });
      await shot(page, "instruction");
      await page.keyboard.press("Enter");
      await page.waitForFunction((b) => {
        const editor = document.querySelector(".editor-instance .monaco-editor");
        const lines = [...editor.querySelectorAll(".view-lines .view-line")]
          .map((el) => ({ top: parseFloat(el.style.top || "0"), text: el.textContent.replace(/\u00a0/g, " ") }))
          .sort((a, c) => a.top - c.top).map((l) => l.text).join("\n");
        return lines !== b;
      }, { timeout: REWRITE_MS, polling: 250 }, shownBefore);
      await shot(page, "rewritten");
      const saved = await save(page);
      return { before, saved };
    });

    await step("status bar item", async () => {
      await page.waitForFunction(() => [...document.querySelectorAll(".statusbar-item")]
        .some((el) => /ngramd/.test(el.textContent || "") && el.querySelector(".codicon-sparkle")),
        { timeout: STEP_MS, polling: 250 });
      const item = await statusItem(page);
      await shot(page, "status");
      return { item };
    });
    report.ok = true;
  } catch (e) {
    report.ok = false;
    report.error = String(e && e.stack || e);
    log(`failed: ${report.error}`);
    try {
      report.failedAt = { editor: await editorText(page), status: await statusItem(page) };
      await shot(page, "failure");
    } catch (e2) {
      log(`no failure screenshot: ${e2}`);
    }
  } finally {
    writeReport();
    await browser.close();
  }
  process.exit(report.ok ? 0 : 1);
}

main().catch((e) => {
  report.ok = false;
  report.error = String(e && e.stack || e);
  writeReport();
  log(`failed: ${report.error}`);
  process.exit(1);
});
