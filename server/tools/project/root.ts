// The project root the Node-side project tools work in: the one Emacs's file tools confine to (its
// current_directory capability, one lookup so that the two never disagree), else the root Emacs last
// told the server (initialize's context or configuration) when no Emacs tools are attached.

import { emacsTool } from "../handlers.js";
import { ToolError, type ToolContext } from "../tool.js";

/** The project root as Emacs's file tools resolve relative paths; a ToolError when none is known. */
export async function projectRoot(ctx: ToolContext, what = "nothing was read"): Promise<string> {
  if (ctx.emacs) {
    try {
      const answer = String(await emacsTool("current_directory")({}, ctx));
      const m = /^Project root: (.*) \(relative paths/.exec(answer);
      if (m) return m[1]!;
    } catch {
      // No Emacs tools (an image-only client): the root the server was told.
    }
  }
  if (ctx.projectRoot) return ctx.projectRoot;
  throw new ToolError(`The project root could not be found, so ${what}.`);
}
