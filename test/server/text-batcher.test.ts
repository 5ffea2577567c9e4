import { describe, expect, it } from "vitest";
import { TextBatcher } from "../../server/agent/text-batcher.js";
import { sleep } from "./helpers.js";

describe("TextBatcher", () => {
  it("joins deltas that arrive together and keeps every character in order", async () => {
    const sent: string[] = [];
    const b = new TextBatcher((t) => sent.push(t), 20);
    for (let i = 0; i < 1000; i++) b.push(`${i},`);
    expect(sent).toEqual([]);
    await sleep(60);
    expect(sent).toHaveLength(1);
    expect(sent[0]).toBe(Array.from({ length: 1000 }, (_, i) => `${i},`).join(""));
  });

  it("sends at once on flush, and nothing when nothing is pending", async () => {
    const sent: string[] = [];
    const b = new TextBatcher((t) => sent.push(t), 1000);
    b.push("a");
    b.push("b");
    b.flush();
    b.flush();
    expect(sent).toEqual(["ab"]);
    b.push("c");
    await sleep(20);
    expect(sent).toEqual(["ab"]);
    b.flush();
    expect(sent).toEqual(["ab", "c"]);
  });
});
