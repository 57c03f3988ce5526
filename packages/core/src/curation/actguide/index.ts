/*
 * ActGuide-RL (arXiv 2605.12004): action data as adaptive guidance for groups the policy cannot solve.
 * Pure pieces, shared by the gym runner (packages/gym/src/guide.ts) and serving: the hint and where it goes,
 * the scheduler that picks how much of the plan to reveal, the two prompt views of a guided step, and
 * plans read back from stored trajectories. docs/actguide.md has the whole picture.
 */
export {
  actionArguments,
  assistantPrefix,
  EMPTY_HINT,
  guidedPrompt,
  HINT_HEADING,
  HINT_INSTRUCTION,
  HINT_LABEL,
  hintSection,
  INJECTION_MODES,
  type InjectionMode,
  type PlanAction,
  pythonJson,
  renderHint,
  stripHint,
  withAssistantPrefix,
} from './hint.js';
export { type PlanSourceStep, planFromSteps } from './plan-from-steps.js';
export { type GuidedStep, messagesWithoutHint, promptViews, type StepPromptViews } from './prompt-views.js';
export { jsonTextAt, pythonFloat, pythonJsonOfText } from './python-json.js';
export {
  chooseGuidanceK,
  fixedRatioK,
  GUIDE_STRATEGIES,
  type GuidanceChoice,
  GuidanceConfig,
  type GuidanceConfigInput,
  type GuidanceProbe,
  type GuidanceProbeFn,
  type GuideStrategy,
  isHardGroup,
} from './schedule.js';
