// A turn's saved end is a position in the saved history; the chat draws the shown history, which
// leaves out the server's package notes. The end must land after the same message and block.
import { describe, expect, it } from "vitest";
import { shownHistory, shownTurnEnds } from "../../server/agent/conversation.js";
import type { Message } from "../../server/llm/provider.js";

const text = (t: string, note = false) => ({ type: "text" as const, text: t, ...(note ? { note: true } : {}) });

describe("shownTurnEnds", () => {
  it("moves an end past a note to the same place in the shown history", () => {
    const messages = [
      { role: "user", content: [text("[package: FOO]", true), text("first")] },
      { role: "assistant", content: [text("answer")] },
      { role: "user", content: [text("second, cancelled")] },
      { role: "user", content: [text("[package: BAR]", true)] },
    ] as unknown as Message[];
    const shown = shownHistory(messages);
    expect(shown.map((m) => m.content.length)).toEqual([1, 1, 1]);
    const ends = shownTurnEnds(messages, [
      { afterMessage: 2 },
      { afterMessage: 3, afterBlocks: 1 },
      { afterMessage: 4, afterBlocks: 1 },
    ]);
    expect(ends).toEqual([{ afterMessage: 2 }, { afterMessage: 3, afterBlocks: 1 }, { afterMessage: 3 }]);
  });

  it("counts only the shown blocks of a message the user's next text joined", () => {
    const messages = [{ role: "user", content: [text("[package: FOO]", true), text("cancelled"), text("joined")] }] as unknown as Message[];
    expect(shownTurnEnds(messages, [{ afterMessage: 1, afterBlocks: 2 }])).toEqual([{ afterMessage: 1, afterBlocks: 1 }]);
  });
});
