/*
 * Loaded into every Node process a verifier starts (NODE_OPTIONS=--require): bare module names never
 * resolve into a node_modules the agent left in the workspace, for require() (the CommonJS search
 * paths) and for import (a resolve hook). The verifier's own folders (its reward/) stay searchable.
 * STEPWISE_NODE_GUARD holds {workspace, allow}: the workspace's path in the sandbox and those folders.
 * The import hook runs in a loader thread, a second V8 isolate that needs about 1 GiB more address
 * space: under a tighter RLIMIT_AS it would crash every node, so it is only registered with room for it
 * (docs/security.md names the gap).
 */
export const NODE_GUARD_CJS = String.raw`'use strict';
const Module = require('node:module');
const cfg = JSON.parse(process.env.STEPWISE_NODE_GUARD || '{}');
if (typeof cfg.workspace === 'string' && cfg.workspace.startsWith('/')) {
  const blocked = (path) =>
    (path === cfg.workspace || path.startsWith(cfg.workspace + '/')) &&
    !(cfg.allow || []).some((dir) => path === dir || path.startsWith(dir + '/'));
  const nodeModulePaths = Module._nodeModulePaths;
  Module._nodeModulePaths = function (from) {
    return nodeModulePaths.call(this, from).filter((p) => !blocked(p));
  };
  for (let i = Module.globalPaths.length - 1; i >= 0; i--) {
    if (blocked(Module.globalPaths[i])) Module.globalPaths.splice(i, 1);
  }
  const roomForLoader = () => {
    try {
      const line = require('node:fs').readFileSync('/proc/self/limits', 'utf8').split('\n')
        .find((l) => l.startsWith('Max address space'));
      const soft = line ? line.slice(26).trim().split(/\s+/)[0] : 'unlimited';
      return soft === 'unlimited' || Number(soft) >= 3 * 1024 * 1024 * 1024;
    } catch {
      return false;
    }
  };
  if (typeof Module.register === 'function' && roomForLoader()) {
    const hook = 'const cfg = ' + JSON.stringify(cfg) + ';\nconst blocked = ' + blocked.toString() + ';\n' +
      'export async function resolve(specifier, context, next) {\n' +
      '  const result = await next(specifier, context);\n' +
      '  const bare = !/^(?:\\.{0,2}\\/|#|[a-zA-Z][a-zA-Z0-9+.-]*:)/.test(specifier);\n' +
      '  if (bare && result.url.startsWith("file:///")) {\n' +
      '    const path = decodeURIComponent(new URL(result.url).pathname);\n' +
      '    if (blocked(path) && path.includes("/node_modules/")) {\n' +
      '      const error = new Error("Cannot find package " + JSON.stringify(specifier) + ": a verifier does not search the workspace node_modules");\n' +
      '      error.code = "ERR_MODULE_NOT_FOUND";\n' +
      '      throw error;\n' +
      '    }\n' +
      '  }\n' +
      '  return result;\n' +
      '}\n';
    Module.register('data:text/javascript,' + encodeURIComponent(hook));
  }
}
`;
