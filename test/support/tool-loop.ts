import type { ChatMessageInput, ChatToolInput } from '../../packages/core/src/text/chat-template.js';

/** The one tool of the model-family checks: its schema has a description, an enum and a default. */
export const READ_FILE_TOOLS: ChatToolInput[] = [
  {
    type: 'function',
    function: {
      name: 'read_file',
      description: 'Read a file from the workspace',
      parameters: {
        type: 'object',
        properties: {
          path: { type: 'string', description: 'Path relative to the workspace' },
          encoding: { type: 'string', enum: ['utf-8', 'latin-1'], default: 'utf-8' },
        },
        required: ['path'],
      },
    },
  },
];

/**
 * A multi-turn tool loop: two calls with reasoning, their results, an answer, and a follow-up
 * question. `callId(n)` names call n (1, 2): mistral-common takes only 9 alphanumeric characters.
 */
export function toolLoop(callId: (n: number) => string = (n) => `call_${n}`): ChatMessageInput[] {
  const call = (n: number, path: string) => ({
    id: callId(n),
    type: 'function' as const,
    function: { name: 'read_file', arguments: JSON.stringify({ path }) },
  });
  return [
    { role: 'system', content: 'You are a careful assistant.' },
    { role: 'user', content: 'What do a.txt and b.txt say?' },
    {
      role: 'assistant',
      content: null,
      reasoning_content: 'Read a.txt first.',
      tool_calls: [call(1, 'a.txt')],
    },
    { role: 'tool', tool_call_id: callId(1), content: '42' },
    { role: 'assistant', content: null, reasoning_content: 'Now b.txt.', tool_calls: [call(2, 'b.txt')] },
    { role: 'tool', tool_call_id: callId(2), content: 'blue' },
    { role: 'assistant', content: 'a.txt says 42 and b.txt says blue.' },
    { role: 'user', content: 'Thanks — and in French?' },
  ];
}
