// The tool that brings more tools in: where the model's context window is small, a conversation is
// offered a core set, and this tool adds the tools of one category for the rest of it
// (server/agent/tool-set.ts). It runs in Node and changes nothing but what the model is offered.

import { defineTool, type Tool } from "../tool.js";

export const ADD_TOOLS = "add_tools";

export const toolSetTools: Tool[] = [
  defineTool({
    name: ADD_TOOLS,
    description: "Add the tools of a listed category from your next step on, for the rest of the conversation.",
    parameters: { category: { type: "string", description: "Category, e.g. debugger." } },
    required: ["category"],
    safety: "safe",
    effect: "changes what the conversation offers from the next step on",
    categories: ["tools"],
    runtime: "node",
    handler: async (a, ctx) => {
      // Outside a lean conversation (a large window, tools/call, MCP) there is nothing to add.
      if (!ctx.offerCategory) return "Every tool is offered already: call the one you need.";
      const category = String(a.category);
      const added = ctx.offerCategory(category);
      return added.length > 0 ? `Added the ${category} tools: ${added.join(", ")}. Call them from your next step on.` : `The ${category} tools are offered already.`;
    },
  }),
];
