import type { Context } from 'hono';
import type { Child } from 'hono/jsx';
import { ValidationError } from '../domain/index.js';
import { nulRefused } from '../http/json-body.js';
import { PAGE_CAP_BYTES, tooLargeMessage } from './bounded.js';
import { CSRF_FIELD, CsrfContext, checkCsrf } from './csrf.js';
import { Page } from './layout.js';

/** A form POST's fields (with `all`, repeated ones as arrays); files are not expected. */
export type FormFields = Record<string, string | File | (string | File)[]>;

/**
 * Reads a form POST's fields. A body that is no form (multipart without its boundary, a broken
 * part) is the sender's mistake: a 400 naming `body`, not the 500 the parser's TypeError would be;
 * a field holding NUL is a 400 naming it; one without this page's CSRF token a 403 (csrf.tsx).
 */
export async function readForm(c: Context, all = true): Promise<FormFields> {
  let form: FormFields;
  try {
    form = await c.req.parseBody({ all });
  } catch (error) {
    throw new ValidationError(`body: not a form (${(error as Error).message})`, 'body');
  }
  // NUL is refused as in a JSON body: PostgreSQL cannot store it, SQLite would.
  for (const [name, value] of Object.entries(form)) {
    const texts = (Array.isArray(value) ? value : [value]).filter((v) => typeof v === 'string');
    if (name.includes('\u0000') || texts.some((v) => v.includes('\u0000'))) throw nulRefused(name);
  }
  const token = form[CSRF_FIELD];
  checkCsrf(c, Array.isArray(token) ? token[0] : token);
  return form;
}

/**
 * Renders a page component as a full HTML document. Pages bound what they draw (bounded.tsx); a
 * page that still comes out over PAGE_CAP_BYTES is never sent: a short page says so, linking `raw`.
 */
export function html(c: Context, page: unknown, status = 200, raw?: string): Response {
  const body = `<!doctype html>${String(<CsrfContext.Provider value={c.get('csrfToken') ?? ''}>{page as Child}</CsrfContext.Provider>)}`;
  const bytes = Buffer.byteLength(body);
  if (bytes <= PAGE_CAP_BYTES) return c.html(body, status as 200);
  return c.html(`<!doctype html>${String(<TooLargePage bytes={bytes} raw={raw} />)}`, status as 200);
}

function TooLargePage({ bytes, raw }: { bytes: number; raw: string | undefined }) {
  return (
    <Page title="Page too large" current={null}>
      <p class="error" role="alert">
        {tooLargeMessage(bytes)}
      </p>
      {raw ? (
        <p>
          <a class="raw-link" href={raw}>
            The full raw JSON
          </a>
        </p>
      ) : null}
    </Page>
  );
}
