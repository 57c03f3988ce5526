/** One tool in the OpenAI `tools` format. */
export interface ToolDefinition {
  type: 'function';
  // A JSON Schema object; typed as a record so it is assignable to the OpenAI SDK's FunctionParameters.
  function: { name: string; description: string; parameters: Record<string, unknown> };
}

const path = (what: string) => ({
  type: 'string',
  description: `${what}, relative to the workspace or absolute inside it`,
});

/** The OpenClaw / ClawGym file and shell tools, as offered to a model. */
export const TOOL_DEFINITIONS: ToolDefinition[] = [
  {
    type: 'function',
    function: {
      name: 'read',
      description:
        'Read a text file. Returns its content; long files are cut with a notice. To read a large file ' +
        'in parts, pass offset (the 1-based line to start at) and limit (how many lines).',
      parameters: {
        type: 'object',
        properties: {
          path: path('Path of the file to read'),
          offset: { type: 'integer', minimum: 1, description: 'Line number to start reading at (1-based)' },
          limit: { type: 'integer', minimum: 1, description: 'Maximum number of lines to read' },
        },
        required: ['path'],
        additionalProperties: false,
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'write',
      description:
        'Write content to a file, replacing it if it exists. Parent directories are created as needed.',
      parameters: {
        type: 'object',
        properties: {
          path: path('Path of the file to write'),
          content: { type: 'string', description: 'The complete new content of the file' },
        },
        required: ['path', 'content'],
        additionalProperties: false,
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'edit',
      description:
        'Edit a file by replacing exact text. oldText must match the file exactly (whitespace and line ' +
        'breaks included) and occur exactly once; add surrounding lines to make it unique.',
      parameters: {
        type: 'object',
        properties: {
          path: path('Path of the file to edit'),
          oldText: { type: 'string', description: 'The exact text to replace' },
          newText: { type: 'string', description: 'The text to put in its place' },
        },
        required: ['path', 'oldText', 'newText'],
        additionalProperties: false,
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'exec',
      description:
        'Run a shell command with bash in the workspace (a sandbox without network access). Returns the ' +
        'exit code, stdout and stderr; long output is cut with a notice.',
      parameters: {
        type: 'object',
        properties: {
          command: { type: 'string', description: 'The shell command to run' },
          workdir: path('Directory to run it in (default: the workspace)'),
          timeout: { type: 'number', exclusiveMinimum: 0, description: 'Timeout in seconds' },
        },
        required: ['command'],
        additionalProperties: false,
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'ls',
      description: "List a directory's entries (default: the workspace). Directories end with '/'.",
      parameters: {
        type: 'object',
        properties: { path: path('Directory to list') },
        additionalProperties: false,
      },
    },
  },
];
