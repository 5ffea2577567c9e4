// Tools that run in Emacs: buffers, files, navigation and the reviewed file edit.
// Emacs owns every buffer, so that a buffer visiting a file is never clobbered behind the user's back.
// Where the two seeds name one capability twice, the alias maps its parameters onto the primary's.

import { BUFFER_FILE, emacsTool, renameArgs } from "../handlers.js";
import { defineTool, type ParamSpec, type Tool } from "../tool.js";

const EMACS_TIMEOUT_MS = 15_000;
const emacs = (capability: string, mapArgs?: Parameters<typeof emacsTool>[1]) => ({
  runtime: "emacs" as const,
  implementation: capability,
  handler: emacsTool(capability, mapArgs),
  timeoutMs: EMACS_TIMEOUT_MS,
});

/** An alias of CAPABILITY whose parameters RENAMES maps onto the primary's (the policy uses it too). */
const emacsAlias = (capability: string, renames: Record<string, string>) => ({
  ...emacs(capability, renameArgs(renames)),
  argumentNames: renames,
});

const filePath: ParamSpec = { type: "string", description: "Relative to the project root, or absolute inside it." };
const bufferName: ParamSpec = { type: "string", description: "Buffer name." };
const PAGING = "Use offset and limit to read a range of lines.";

export const emacsTools: Tool[] = [
  defineTool({
    name: "read_file",
    description: "Read a project file (a visiting buffer's unsaved text if any), paged by lines.",
    parameters: {
      path: filePath,
      offset: { type: "integer", description: "First line, 1-based (default 1).", minimum: 1 },
      limit: { type: "integer", description: "Lines to read (default: up to the cap).", minimum: 1 },
    },
    required: ["path"],
    review: "target",
    safety: "safe",
    categories: ["buffer", "filesystem"],
    pagingHint: PAGING,
    ...emacs("read_file"),
  }),
  defineTool({
    name: "file_read",
    description: "Read the contents of a file inside the project.",
    parameters: { file_path: filePath },
    required: ["file_path"],
    review: "target",
    safety: "safe",
    categories: ["buffer", "filesystem"],
    aliasOf: "read_file",
    ...emacsAlias("read_file", { file_path: "path" }),
  }),
  defineTool({
    name: "write_file",
    description: "Create or overwrite a project file (atomic; a visiting buffer is updated, never clobbered if modified).",
    parameters: {
      path: filePath,
      content: { type: "string", description: "The whole new content." },
    },
    required: ["path", "content"],
    review: "target",
    writesFile: "path",
    safety: "dangerous",
    categories: ["buffer", "filesystem"],
    ...emacs("write_file"),
  }),
  defineTool({
    name: "file_write",
    description: "Write content to a file inside the project (creates or overwrites).",
    parameters: {
      file_path: filePath,
      content: { type: "string", description: "Content to write to the file." },
      append: { type: "boolean", description: "Append to the file instead of overwriting." },
    },
    required: ["file_path", "content"],
    review: "target",
    safety: "dangerous",
    categories: ["buffer", "filesystem"],
    aliasOf: "write_file",
    ...emacsAlias("write_file", { file_path: "path" }),
  }),
  defineTool({
    name: "read_buffer",
    description: "A buffer's text, or from start to end (1-based).",
    parameters: {
      buffer: { type: "string", description: "Buffer (default: user's last one)." },
      start: { type: "integer", description: "Start position.", minimum: 1 },
      end: { type: "integer", description: "End position.", minimum: 1 },
    },
    safety: "safe",
    categories: ["buffer"],
    pagingHint: "Use start and end to read a range.",
    ...emacs("read_buffer"),
  }),
  defineTool({
    name: "buffer_get_content",
    description: "Get the content of a buffer.",
    parameters: {
      buffer_name: bufferName,
      max_lines: { type: "integer", description: "Maximum number of lines to return (optional).", minimum: 1 },
    },
    required: ["buffer_name"],
    safety: "safe",
    categories: ["buffer"],
    aliasOf: "read_buffer",
    ...emacsAlias("read_buffer", { buffer_name: "buffer" }),
  }),
  defineTool({
    name: "read_region",
    description: "Read the region (between point and mark) of a buffer, the text the user selected; narrowing hides none of it.",
    parameters: {
      buffer: { type: "string", description: "Buffer (default: user's last one)." },
    },
    safety: "safe",
    categories: ["buffer"],
    pagingHint: "Use read_buffer with start and end to read a range.",
    ...emacs("read_region"),
  }),
  defineTool({
    name: "write_to_buffer",
    description: "Insert text in a buffer at a position (default: its end). Does not save.",
    parameters: {
      content: { type: "string", description: "Text to insert." },
      buffer: { type: "string", description: "Buffer (default: user's last one)." },
      position: { type: "integer", description: "Character position, 1-based.", minimum: 1 },
    },
    required: ["content"],
    review: "target",
    writesBuffer: "buffer",
    safety: "cautious",
    categories: ["buffer"],
    ...emacs("write_to_buffer"),
  }),
  defineTool({
    name: "search_in_buffer",
    description: "Search a buffer for text or a regexp; returns matches with line numbers and context.",
    parameters: {
      pattern: { type: "string", description: "Text or Emacs regexp to find." },
      buffer: { type: "string", description: "Buffer (default: user's last one)." },
      regex: { type: "boolean", description: "Pattern is an Emacs regexp (default false)." },
      all_matches: { type: "boolean", description: "Every match, not just the first (default false)." },
      buffer_name: { type: "string", description: "Same as buffer.", notOffered: true },
      search_text: { type: "string", description: "Same as pattern.", notOffered: true },
      case_sensitive: { type: "boolean", description: "Match case (default false)." },
    },
    safety: "safe",
    categories: ["buffer", "navigation"],
    // The other seed's names of buffer and pattern: rules and Emacs see the primary names alone.
    ...emacsAlias("search_in_buffer", { buffer_name: "buffer", search_text: "pattern" }),
  }),
  defineTool({
    name: "buffer_append",
    description: "Append text to the end of a buffer. Does not save.",
    parameters: { buffer_name: bufferName, text: { type: "string", description: "Text to append." } },
    required: ["buffer_name", "text"],
    review: "target",
    writesBuffer: "buffer_name",
    safety: "cautious",
    categories: ["buffer"],
    ...emacs("buffer_append"),
  }),
  defineTool({
    name: "buffer_edit",
    description: "Replace text in a buffer: old_text must occur exactly once. Does not save.",
    parameters: {
      buffer_name: bufferName,
      old_text: { type: "string", description: "Exact text to replace, unique in the buffer." },
      new_text: { type: "string", description: "Replacement text." },
    },
    required: ["buffer_name", "old_text", "new_text"],
    review: "target",
    writesBuffer: "buffer_name",
    safety: "cautious",
    categories: ["buffer"],
    ...emacs("buffer_edit"),
  }),
  defineTool({
    name: "buffer_create",
    description: "Create a buffer (visiting no file).",
    parameters: {
      buffer_name: { type: "string", description: "Its name." },
      content: { type: "string", description: "Its initial content." },
      mode: { type: "string", description: "Major mode, e.g. lisp-mode." },
    },
    required: ["buffer_name", "content"],
    safety: "cautious",
    categories: ["buffer"],
    ...emacs("buffer_create"),
  }),
  defineTool({
    name: "buffer_save",
    description: "Save a buffer to a project file.",
    parameters: {
      buffer_name: bufferName,
      file_path: { type: "string", description: "Project-relative path (default: its file)." },
    },
    required: ["buffer_name"],
    review: "target",
    writesFile: "file_path",
    safety: "dangerous",
    categories: ["buffer", "filesystem"],
    ...emacs("buffer_save"),
  }),
  defineTool({
    name: BUFFER_FILE,
    description: "Internal: the file a buffer the agent may write visits, if any (for the protected-file check).",
    parameters: { buffer: { type: "string", description: "Buffer (default: the user's last one)." } },
    safety: "safe",
    categories: ["buffer"],
    internal: true,
    ...emacs(BUFFER_FILE),
  }),
  defineTool({
    name: "buffer_list",
    description: "List buffers with their files, modes and modified flags.",
    parameters: { include_hidden: { type: "boolean", description: "Include hidden buffers (name starts with a space)." } },
    safety: "safe",
    categories: ["buffer"],
    ...emacs("buffer_list"),
  }),
  defineTool({
    name: "directory_list",
    description: "List a project directory.",
    parameters: {
      directory_path: { type: "string", description: "Relative to the project root (default: the root)." },
      recursive: { type: "boolean", description: "Recurse into subdirectories." },
      pattern: { type: "string", description: "Only names matching a wildcard (*.lisp)." },
    },
    review: "target",
    safety: "safe",
    categories: ["filesystem"],
    ...emacs("directory_list"),
  }),
  defineTool({
    name: "current_directory",
    description: "The project root, which relative paths are resolved against.",
    parameters: {},
    safety: "safe",
    categories: ["filesystem"],
    ...emacs("current_directory"),
  }),
  defineTool({
    name: "file_exists",
    description: "Whether a file or directory exists in the project.",
    parameters: { path: { type: "string", description: "Path to check." } },
    required: ["path"],
    review: "target",
    safety: "safe",
    categories: ["filesystem"],
    ...emacs("file_exists"),
  }),
  defineTool({
    name: "goto_line",
    description: "Move point to a line of a buffer and show it.",
    parameters: {
      buffer_name: bufferName,
      line_number: { type: "integer", description: "Line number, 1-based.", minimum: 1 },
    },
    required: ["buffer_name", "line_number"],
    safety: "safe",
    effect: "moves point in a buffer and shows it",
    categories: ["navigation"],
    ...emacs("goto_line"),
  }),
  defineTool({
    name: "propose_file_edit",
    description:
      "Propose a file change, reviewed by the user as a diff hunk by hunk. Give new_content, or old_text and new_text. The result says which hunks were applied.",
    parameters: {
      path: filePath,
      new_content: { type: "string", description: "The whole proposed file content." },
      old_text: { type: "string", description: "Exact text to replace, unique in the file." },
      new_text: { type: "string", description: "Replacement for old_text." },
      description: { type: "string", description: "One line telling the user why." },
      accepted_hunks: {
        type: "array",
        items: { type: "integer" },
        description: "Set by the review; leave it out.",
        notOffered: true,
      },
    },
    required: ["path"],
    review: "diff",
    writesFile: "path",
    safety: "dangerous",
    categories: ["diff", "filesystem"],
    ...emacs("propose_file_edit"),
  }),
];
