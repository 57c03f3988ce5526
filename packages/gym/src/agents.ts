import type { CleanerOptions, CleanerReport } from '@stepwise/core';
import { ModelAdapters, type ModelRef } from '@stepwise/core';
import { type AgentOutcome, runBuiltinAgent } from './agent/builtin.js';
import type { ClaudeCodeInstall } from './agent/claude-code/install.js';
import { claudeCodeDriver } from './agent/claude-code/run.js';
import type { CodexInstall } from './agent/codex/install.js';
import { codexDriver } from './agent/codex/run.js';
import { AgentFailed, runExternalAgent, type SandboxedAgentOptions } from './agent/external.js';
import { type AgentDriver, runInstalledAgent } from './agent/installed.js';
import type { OpenClawInstall } from './agent/openclaw/install.js';
import { openClawDriver } from './agent/openclaw/run.js';

/*
 * The agents a gym run can use, one entry a kind: the built-in agent, a command template, and the
 * installed agents (a driver each, run by agent/installed.ts). Every entry ends the same way: an
 * outcome, or AgentFailed when the agent failed (the sample scores 0); anything else it throws is
 * the infrastructure's (the runner decides: sample.ts isInfra).
 */

export type AgentSpec =
  | {
      kind: 'builtin';
      maxTurns?: number;
      turnTimeoutMs?: number;
      cleaner?: CleanerOptions;
      /**
       * The engine's model folder (`gym run --model-dir`, or the in-process engines' one): CLEANER's
       * graft token and decoding follow it. Absent: the built-in Qwen3, as the gateway's default.
       */
      model?: ModelRef;
      /** The tools offered (default: all five). */
      tools?: readonly string[];
      toolDescriptions?: 'full' | 'short';
      systemPrompt?: string;
      chatTemplateKwargs?: Record<string, unknown>;
      temperature?: number;
      maxTokens?: number;
    }
  | { kind: 'command'; template: string }
  | { kind: 'openclaw'; install: OpenClawInstall; allowTools?: readonly string[] }
  | { kind: 'codex'; install: CodexInstall }
  | { kind: 'claude-code'; install: ClaudeCodeInstall };

/** One sample's episode, as the runner gives it to an agent beside the sandboxed-agent options. */
export interface Episode {
  /** The built-in agent's seed (runner.ts sampleSeed). */
  seed: number;
  /** Aborts at the sample's timeout. */
  signal: AbortSignal;
  /** What CLEANER did, however the episode ends (the built-in agent). */
  onCleanerReport(report: CleanerReport): void;
  /** Merges into the trajectory's metadata (an installed agent's report). */
  mergeMetadata(metadata: Record<string, unknown>): Promise<void>;
}

export interface AgentEntry<Spec extends AgentSpec> {
  /** What identifies the agent in a run id (runner.ts defaultRunId): its settings that shape the groups. */
  runKey(spec: Spec): string;
  run(spec: Spec, run: SandboxedAgentOptions, episode: Episode): Promise<AgentOutcome>;
}

/**
 * An installed agent: what it reported goes into the trajectory's metadata under its key whatever the
 * outcome; a run that did not finish ok fails the sample.
 */
function installed<Spec extends Extract<AgentSpec, { install: { version: string } }>>(
  driverOf: (spec: Spec) => AgentDriver<unknown, object>,
): AgentEntry<Spec> {
  return {
    runKey: (spec) => `${spec.kind}@${spec.install.version}`,
    async run(spec, run, episode) {
      const driver = driverOf(spec);
      const result = await runInstalledAgent(driver, run);
      await episode.mergeMetadata({ [driver.metadataKey]: result.metadata });
      if (!result.ok) throw new AgentFailed(result.reason ?? `${driver.name} failed`);
      return result.outcome;
    },
  };
}

/** The built-in agent's model adapters, each folder's built once per process. */
const builtinAdapters = new ModelAdapters();

export const AGENTS: { [Kind in AgentSpec['kind']]: AgentEntry<Extract<AgentSpec, { kind: Kind }>> } = {
  builtin: {
    runKey: (spec) =>
      (spec.cleaner ? `builtin+cleaner${JSON.stringify(spec.cleaner)}` : 'builtin') +
      (spec.model ? `+model${JSON.stringify(spec.model)}` : ''),
    run: (spec, run, episode) =>
      runBuiltinAgent({
        ...run,
        onCleanerReport: episode.onCleanerReport,
        maxTurns: spec.maxTurns,
        turnTimeoutMs: spec.turnTimeoutMs,
        tools: spec.tools,
        toolDescriptions: spec.toolDescriptions,
        systemPrompt: spec.systemPrompt,
        chatTemplateKwargs: spec.chatTemplateKwargs,
        temperature: spec.temperature,
        maxTokens: spec.maxTokens,
        seed: episode.seed,
        signal: episode.signal,
        cleaner: spec.cleaner,
        ...(spec.model ? { modelAdapter: builtinAdapters.of(spec.model) } : {}),
      }),
  },
  command: {
    runKey: (spec) => spec.template,
    run: (spec, run) => runExternalAgent({ ...run, template: spec.template }),
  },
  openclaw: installed((spec) => openClawDriver({ install: spec.install, allowTools: spec.allowTools })),
  codex: installed((spec) => codexDriver({ install: spec.install })),
  'claude-code': installed((spec) => claudeCodeDriver({ install: spec.install })),
};

/** The entry of a spec's kind. */
export const agentEntry = <Spec extends AgentSpec>(spec: Spec): AgentEntry<Spec> =>
  AGENTS[spec.kind] as unknown as AgentEntry<Spec>;
