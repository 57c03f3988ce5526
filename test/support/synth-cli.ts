import { Command } from 'commander';
import { vi } from 'vitest';
import { registerSynthCommand } from '../../src/cli/gym-synth.js';

/** Runs `stepwise gym synth ...` in process; returns what it printed, or the error it ended with. */
export async function synthCli(...args: string[]): Promise<{ out: string; error: string | null }> {
  const program = new Command('stepwise').exitOverride();
  let out = '';
  program.configureOutput({ writeOut: (s) => (out += s), writeErr: (s) => (out += s) });
  registerSynthCommand(program.command('gym'));
  const write = vi.spyOn(process.stdout, 'write').mockImplementation((chunk) => {
    out += String(chunk);
    return true;
  });
  const log = vi.spyOn(console, 'log').mockImplementation((...parts) => {
    out += `${parts.join(' ')}\n`;
  });
  try {
    await program.parseAsync(['node', 'stepwise', 'gym', 'synth', ...args]);
    return { out, error: null };
  } catch (error) {
    return { out, error: (error as Error).message };
  } finally {
    write.mockRestore();
    log.mockRestore();
  }
}
