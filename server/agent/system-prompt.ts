// The system prompt. The tool schemas sent with every request
// carry each tool's full description, so the prompt says only what they cannot: how to work in a
// live image, which offered tools ask the user first or are logged under the user's trust levels
// (the schemas carry the declared level, not the user's overrides), the editor's context (current
// package, project root) and the project's own instructions file when there is one.

import { readProjectFile } from "./project-files.js";
import type { SafetyLevel, Tool } from "../tools/tool.js";
import type { Message } from "../llm/provider.js";
import { cutText, removeInvisible } from "../text.js";
import type { ProjectInstructions } from "../protocol.js";

export interface SystemPromptInput {
  tools: readonly Tool[];
  /** The level in force for a tool after the user's overrides. */
  safetyOf: (tool: Tool) => SafetyLevel;
  currentPackage?: string;
  projectRoot?: string;
  /** Told why a project instruction file was not read (it is confined like the file tools). */
  onRefused?: (message: string) => void;
  /** What add_tools can bring in, when a lean set is offered (tool-set.ts's moreToolsSection). */
  moreTools?: string;
  /** Told which project instruction file the prompt includes, its size and what was removed from it. */
  onInstructions?: (instructions: ProjectInstructions) => void;
}

/** Project instruction files, first found wins. */
export const INSTRUCTION_FILES = ["AGENT-Q.md", "AGENTS.md"] as const;
export const MAX_INSTRUCTION_CHARS = 16_000;

const INTRO = `You are Agent-Q, an AI assistant in a live Common Lisp image, from the developer's Emacs. Your tools query the running image, buffers and files: use them rather than guess.`;

const HOW_TO_WORK = `## How To Work
1. Ask the image first: what is loaded is the truth, files may differ
2. For a bug: reproduce it, then read the error, the code and its callers
3. Test new code in the image before presenting it, and say that evaluating it changed the image
4. If something fails (a tool result starting with "Error:" is a failed call), find out why and try again
5. Explain your reasoning when it helps

## Guidelines
- Write idiomatic Common Lisp; be precise about packages and symbols
- Say what you changed and why`;

const PROJECT_OR_IMAGE = `## Image Or Files
- What is loaded: ask the image
- Any project file's text, loaded or not (tests, .asd, docs, C...): search_project, find_files (on disk, not unsaved buffers)
- What changed, who wrote it: the vcs tools`;

const IMAGE_CHANGES = `- What the image holds that no file does (from compile_form, eval_form, the REPL, an unsaved buffer; files changed since loading): image_changes. Lost at the next restart: offer to write it to its file (replace_definition)`;

export function buildSystemPrompt(input: SystemPromptInput): string {
  const parts: string[] = [INTRO];
  if (input.tools.length === 0) {
    parts.push("(No tools are available in this session: answer from what you know and say so when you cannot check.)");
  }
  parts.push(HOW_TO_WORK);

  const byLevel = (level: SafetyLevel) => input.tools.filter((t) => input.safetyOf(t) === level).map((t) => `\`${t.name}\``);
  const asks = byLevel("dangerous");
  const logged = byLevel("cautious");
  if (asks.length > 0 || logged.length > 0) {
    const trust = ["## Approval"];
    if (asks.length > 0) trust.push(`- Ask the user first, who may deny them: ${asks.join(", ")}`);
    if (logged.length > 0) trust.push(`- Run without asking, and are logged: ${logged.join(", ")}`);
    trust.push("- The others only read, and run at once");
    if (asks.length > 0) trust.push("- A denied call did not run: read the reason, then try another way or ask");
    parts.push(trust.join("\n"));
  }

  if (input.tools.some((t) => t.name === "search_project")) {
    parts.push(input.tools.some((t) => t.name === "image_changes") ? `${PROJECT_OR_IMAGE}\n${IMAGE_CHANGES}` : PROJECT_OR_IMAGE);
  }

  if (input.moreTools) parts.push(input.moreTools);

  const context: string[] = [];
  if (input.currentPackage) context.push(`- Current package in the REPL: ${input.currentPackage} (names are read in it by default)`);
  if (input.projectRoot) context.push(`- Project root: ${input.projectRoot} (paths are relative to it)`);
  if (context.length > 0) parts.push(`## Context\n${context.join("\n")}`);

  const instructions = input.projectRoot ? readInstructions(input.projectRoot, input.onRefused) : undefined;
  if (instructions) {
    parts.push(`## Project Instructions (from ${instructions.file})\n${instructions.text}`);
    input.onInstructions?.(instructions.shown);
  }
  return parts.join("\n\n");
}

/** The system prompt a conversation's requests carry. */
export interface KeptPrompt {
  readonly text: string;
  /** The package the text names. */
  readonly currentPackage: string | undefined;
}

/** The note that tells the model the REPL's package changed since the system prompt was written. */
function packageNote(pkg: string): string {
  return `(The REPL's current package is now ${pkg}: names are read in it by default.)`;
}
const PACKAGE_NOTE = /^\(The REPL's current package is now (.+): names are read in it by default\.\)$/s;

/**
 * The package the model last heard of from a request with PROMPT and MESSAGES: the last package note
 * the history holds, else the one the prompt names. Read from the history the model is sent, so a
 * compaction, a resume or a rewind that took a note away (or kept one) counts as it should.
 */
function packageTold(prompt: KeptPrompt, messages: readonly Message[]): string | undefined {
  let told = prompt.currentPackage;
  for (const m of messages) {
    if (m.role !== "user") continue;
    for (const b of m.content) {
      const said = b.type === "text" && b.note ? PACKAGE_NOTE.exec(b.text)?.[1] : undefined;
      if (said !== undefined) told = said;
    }
  }
  return told;
}

/**
 * The system prompt for a turn of a conversation whose requests carried KEPT so far and whose history
 * is MESSAGES. When only the REPL's package changed, the text stays as sent (a provider's prompt cache
 * holds only while the prefix is the same to the byte); when anything else changed (the tools, their
 * levels, the instructions file) the prompt is written anew. Either way NOTE, to go before the user's
 * text, says the REPL's package where the model last heard of another.
 */
export function promptForTurn(input: SystemPromptInput, kept: KeptPrompt | undefined, messages: readonly Message[]): { kept: KeptPrompt; note?: string } {
  const now = input.currentPackage;
  const prompt =
    kept && buildSystemPrompt({ ...input, currentPackage: kept.currentPackage }) === kept.text ? kept : { text: buildSystemPrompt(input), currentPackage: now };
  return now && now !== packageTold(prompt, messages) ? { kept: prompt, note: packageNote(now) } : { kept: prompt };
}

/**
 * The project's instruction file, bounded in size and without the characters a reader cannot see
 * (removeInvisible: a cloned repository could otherwise steer the model with text its user never
 * saw); undefined when there is none. SHOWN says what the user is told of it. A file the confinement
 * refuses (a link out of the project, to /proc, a FIFO...) is skipped and ON-REFUSED told.
 */
export function readInstructions(projectRoot: string, onRefused?: (message: string) => void): { file: string; text: string; shown: ProjectInstructions } | undefined {
  for (const file of INSTRUCTION_FILES) {
    // Bytes: a UTF-8 character is at most 4, so the character bound below still applies after.
    const read = readProjectFile(projectRoot, file, MAX_INSTRUCTION_CHARS * 4);
    if (read.kind === "refused") onRefused?.(`${file} was not read: ${read.reason}.`);
    if (read.kind !== "read") continue;
    const { text: visible, removed } = removeInvisible(read.text);
    let text = visible.trim();
    if (text === "") continue;
    const truncated = read.truncated || text.length > MAX_INSTRUCTION_CHARS;
    if (truncated) {
      text = `${cutText(text, MAX_INSTRUCTION_CHARS)}\n[... ${file} is longer; the rest was left out.]`;
    }
    const shown: ProjectInstructions = {
      file,
      bytes: read.size,
      removed: removed.count,
      removedCharacters: removed.characters,
      ...(removed.tagText !== undefined ? { tagText: removed.tagText } : {}),
      ...(truncated ? { truncated: true } : {}),
    };
    return { file, text, shown };
  }
  return undefined;
}

/** A size in bytes as the user reads it: "812 bytes", "1.2 KB", "3.4 MB". */
function size(bytes: number): string {
  if (bytes < 1024) return `${bytes} byte${bytes === 1 ? "" : "s"}`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KB`;
  return `${(bytes / (1024 * 1024)).toFixed(1)} MB`;
}

/** What the chat says of the project instructions a conversation's prompt includes ("AGENT-Q.md, 1.2 KB; ..."). */
export function instructionsNotice(i: ProjectInstructions): string {
  const parts = [`Project instructions sent to the model: ${i.file}, ${size(i.bytes)}`];
  if (i.truncated) parts.push(`only its first ${MAX_INSTRUCTION_CHARS} characters`);
  if (i.removed > 0) {
    parts.push(`${i.removed} invisible character${i.removed === 1 ? "" : "s"} removed${i.tagText !== undefined ? " (text hidden in Unicode tag characters among them)" : ""}`);
  }
  return `${parts.join("; ")}. M-x sly-agent-q-show-system-prompt shows what the model is told.`;
}
