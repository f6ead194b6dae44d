"""Editor plugin tests: node's test runner for the VS Code extension's pure logic and
headless Neovim for the Lua plugin. Each skips, with the reason, where its program
(node/npm, nvim) cannot be found; nothing else makes them skip."""
