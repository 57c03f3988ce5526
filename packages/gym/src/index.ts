/*
 * @stepwise/gym's public API: what the synthesis package and other programs import. The gym reaches
 * the server only through the core's SDK (`@stepwise/core`); the CLI reaches its modules by path.
 */

export { type GateOptions, gateTask, scaffoldPaths } from './gate.js';
export { VerifierParams, verifierPlugin } from './reward-plugin.js';
export { checkSandbox } from './sandbox/index.js';
export { writeClawGymFolder } from './tasks/clawgym.js';
export { TASKS_FILE, writeTasksJsonl } from './tasks/jsonl.js';
export { CLAWGYM_ENTRY_FORMAT } from './tasks/python-json.js';
export { CATEGORIES, Check, GymTask, ReferenceAction, type TaskFile } from './tasks/schema.js';
export { parseToolArguments, TOOL_NAMES } from './tools/arguments.js';
export { TOOL_DEFINITIONS } from './tools/definitions.js';
