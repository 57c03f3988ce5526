// The install kit shared by every pinned tool (the agents in agent/, the sandbox root in sandbox/rootfs.ts):
// the tools folder, checked downloads, commands, build-once. It imports neither. docs/architecture.md
export { runCommand } from './command.js';
export { extractExecutables, packOne, verifyIntegrity } from './download.js';
export { IntegrityError, ToolInstallError } from './errors.js';
export { type InstallOnceOptions, installOnce } from './install-once.js';
export { defaultToolsDir } from './tools-dir.js';
