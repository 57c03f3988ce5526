import type { runInSandbox, SandboxOptions } from '../sandbox/index.js';

/** Sandbox settings a verifier is given: everything but the workspace and where it is mounted. */
export type SandboxSettings = Omit<SandboxOptions, 'workspace' | 'mountDir'>;

/** How verifiers run a command in the sandbox; `runInSandbox` in production, injectable for tests. */
export type SandboxRunner = typeof runInSandbox;

/** `runInSandbox`, loaded when first used (the verifiers' pure parts do not need the sandbox). */
export const defaultSandboxRunner: SandboxRunner = async (...args) => {
  const sandbox = await import('../sandbox/index.js');
  return sandbox.runInSandbox(...args);
};

/** Verifiers never talk to the network: the gateway bridge an agent gets is dropped. */
export function verifierSandbox(settings: SandboxSettings | undefined, workspace: string, mountDir: string) {
  const options: SandboxOptions = { ...settings, workspace, mountDir };
  delete options.gateway;
  return options;
}

/** Single-quotes a string for POSIX shells. */
export function shellQuote(s: string): string {
  return `'${s.replaceAll("'", `'\\''`)}'`;
}

/** The last `max` characters of a process's output, for a failure reason. */
export function tail(text: string, max = 400): string {
  const t = text.trim();
  return t.length <= max ? t : `…${t.slice(-max)}`;
}
