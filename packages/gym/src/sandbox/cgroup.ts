import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, rmdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

/*
 * Memory and processes per sandbox, as one group: a control group made for each run, a child of the
 * group Stepwise itself runs in (so the host's own limits still hold over it), holding every process of
 * the sandbox from bwrap on. cgroup v2 where the host has it, else the v1 `memory` and `pids`
 * controllers; where neither can be written (not root, a read-only cgroupfs, a v2 tree that is not
 * delegated), null: the per-process rlimits (RLIMIT_AS, RLIMIT_NPROC) are all there is.
 * docs/gym-sandbox.md#memory-and-processes
 */

const CGROUP_ROOT = '/sys/fs/cgroup';
/** A v2 process cannot share a group with the sandboxes' parent group: it moves itself into this leaf. */
const RUNNER_LEAF = 'stepwise-runner';

export interface GroupLimits {
  memoryBytes: number;
  /** Processes and threads, all of the sandbox's together. */
  tasks: number;
}

export interface GroupEvents {
  /** Processes the kernel's OOM killer ended because the group was over its memory. */
  oomKills: number;
  /** forks and clones the group refused at its task limit. */
  forksRefused: number;
}

export interface SandboxGroup {
  version: 1 | 2;
  /** cgroup.procs files the sandbox's first process writes its own pid into before it starts. */
  procs: string[];
  events(): Promise<GroupEvents>;
  /** Removes the group (killing anything still in it). Never throws. */
  remove(): Promise<void>;
}

/** /proc/self/cgroup: controller (or '' for v2) -> this process's group path. */
async function ownGroups(): Promise<Map<string, string>> {
  const text = await readFile('/proc/self/cgroup', 'utf8').catch(() => '');
  const groups = new Map<string, string>();
  for (const line of text.split('\n')) {
    const [, controllers, path] = line.match(/^\d+:([^:]*):(.*)$/) ?? [];
    if (path === undefined) continue;
    for (const c of controllers!.split(',')) groups.set(c, path);
  }
  return groups;
}

function counter(text: string, key: string): number {
  const match = new RegExp(`^${key} (\\d+)$`, 'm').exec(text);
  return match ? Number(match[1]) : 0;
}

const readText = (path: string) => readFile(path, 'utf8').catch(() => '');

/**
 * A group for one sandbox run with `limits`, or null where the host gives none (see the top of the
 * file). The caller must `remove()` it after the run.
 */
export async function createSandboxGroup(limits: GroupLimits): Promise<SandboxGroup | null> {
  if (process.getuid?.() !== 0) return null;
  const name = `stepwise-sandbox-${process.pid}-${randomUUID().slice(0, 8)}`;
  const own = await ownGroups();
  if (existsSync(join(CGROUP_ROOT, 'cgroup.controllers')) && own.has('')) {
    return await v2Group(own.get('')!, name, limits).catch(() => null);
  }
  const memory = own.get('memory');
  const pids = own.get('pids');
  if (memory === undefined || pids === undefined) return null;
  return await v1Group(memory, pids, name, limits).catch(() => null);
}

async function v1Group(memory: string, pids: string, name: string, limits: GroupLimits) {
  const dirs = {
    memory: join(CGROUP_ROOT, 'memory', memory, name),
    pids: join(CGROUP_ROOT, 'pids', pids, name),
  };
  const made: string[] = [];
  try {
    for (const dir of Object.values(dirs)) {
      await mkdir(dir);
      made.push(dir);
    }
    const bytes = String(Math.floor(limits.memoryBytes));
    await writeFile(join(dirs.memory, 'memory.limit_in_bytes'), bytes);
    // With swap accounting, memory + swap are capped at the same figure: no swapping past the limit.
    const memsw = join(dirs.memory, 'memory.memsw.limit_in_bytes');
    if (existsSync(memsw)) await writeFile(memsw, bytes);
    await writeFile(join(dirs.pids, 'pids.max'), String(limits.tasks));
  } catch (error) {
    await removeGroups(made);
    throw error;
  }
  return {
    version: 1 as const,
    procs: [join(dirs.memory, 'cgroup.procs'), join(dirs.pids, 'cgroup.procs')],
    events: async (): Promise<GroupEvents> => ({
      oomKills: counter(await readText(join(dirs.memory, 'memory.oom_control')), 'oom_kill'),
      forksRefused: counter(await readText(join(dirs.pids, 'pids.events')), 'max'),
    }),
    remove: () => removeGroups(made),
  };
}

async function v2Group(own: string, name: string, limits: GroupLimits) {
  // Sandboxes are children of the group Stepwise was started in; Stepwise itself moves to a leaf beside
  // them, as a group with processes cannot hand controllers to children (cgroup v2's rule).
  const parentPath = own.endsWith(`/${RUNNER_LEAF}`) ? own.slice(0, -RUNNER_LEAF.length - 1) : own;
  const parent = join(CGROUP_ROOT, parentPath);
  const available = (await readText(join(parent, 'cgroup.controllers'))).split(/\s+/);
  if (!available.includes('memory') || !available.includes('pids')) return null;
  const enabled = (await readText(join(parent, 'cgroup.subtree_control'))).split(/\s+/);
  if (!enabled.includes('memory') || !enabled.includes('pids')) {
    const control = join(parent, 'cgroup.subtree_control');
    try {
      await writeFile(control, '+memory +pids');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EBUSY' || parentPath !== own) throw error;
      const leaf = join(parent, RUNNER_LEAF);
      await mkdir(leaf).catch((e: NodeJS.ErrnoException) => {
        if (e.code !== 'EEXIST') throw e;
      });
      await writeFile(join(leaf, 'cgroup.procs'), String(process.pid));
      await writeFile(control, '+memory +pids');
    }
  }
  const dir = join(parent, name);
  await mkdir(dir);
  try {
    await writeFile(join(dir, 'memory.max'), String(Math.floor(limits.memoryBytes)));
    if (existsSync(join(dir, 'memory.swap.max'))) await writeFile(join(dir, 'memory.swap.max'), '0');
    await writeFile(join(dir, 'pids.max'), String(limits.tasks));
  } catch (error) {
    await removeGroups([dir]);
    throw error;
  }
  return {
    version: 2 as const,
    procs: [join(dir, 'cgroup.procs')],
    events: async (): Promise<GroupEvents> => ({
      oomKills: counter(await readText(join(dir, 'memory.events')), 'oom_kill'),
      forksRefused: counter(await readText(join(dir, 'pids.events')), 'max'),
    }),
    remove: () => removeGroups([dir]),
  };
}

/** rmdir each group; whatever is still in one (it should not be: the sandbox's pid namespace ended) is killed first. */
async function removeGroups(dirs: readonly string[]): Promise<void> {
  for (const dir of dirs) {
    for (let attempt = 0; attempt < 50; attempt++) {
      try {
        await rmdir(dir);
        break;
      } catch (error) {
        const code = (error as NodeJS.ErrnoException).code;
        if (code === 'ENOENT' || code !== 'EBUSY') break;
      }
      for (const pid of (await readText(join(dir, 'cgroup.procs'))).split('\n').filter(Boolean)) {
        try {
          process.kill(Number(pid), 'SIGKILL');
        } catch {
          // Already gone.
        }
      }
      await sleep(20);
    }
  }
}
