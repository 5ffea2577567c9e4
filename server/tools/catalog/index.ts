// Every built-in tool, each declared once in the file of its runtime.

import { ToolRegistry } from "../registry.js";
import type { Tool } from "../tool.js";
import { debuggerTools } from "./debugger.js";
import { emacsTools } from "./emacs.js";
import { imageTools } from "./image.js";
import { projectTools } from "./project.js";
import { shellTools } from "./shell.js";
import { sourceTools } from "./source.js";
import { toolSetTools } from "./tool-set.js";

export const builtinTools: readonly Tool[] = [...imageTools, ...sourceTools, ...emacsTools, ...projectTools, ...shellTools, ...debuggerTools, ...toolSetTools];

export function createDefaultRegistry(): ToolRegistry {
  const registry = new ToolRegistry();
  for (const tool of builtinTools) registry.register(tool);
  return registry;
}
