import { type Logger, pino } from 'pino';

/** JSON logs on stderr; credentials are redacted wherever they appear. */
export function createLogger(level = process.env.STEPWISE_LOG_LEVEL ?? 'info'): Logger {
  return pino(
    {
      level,
      redact: {
        paths: [
          '*.authorization',
          '*.headers.authorization',
          '*["x-api-key"]',
          'apiKey',
          'apiKeys',
          '*.apiKey',
          'key',
        ],
        censor: '[redacted]',
      },
    },
    pino.destination(2),
  );
}
