// The trust policy: the one place that decides, from the user's configuration, which tools
// are offered and whether a call runs, asks or is refused. The agent loop's offered list and the
// executor's check both come from a ToolPolicy, so they cannot disagree. Decisions follow the
// capability (the primary tool behind an alias, its categories), never the spelling the model used.
//
// Effective level of a tool: the most cautious override given for its name or its primary's name;
// else the most cautious level among its categories' levels; else its declared level.
// Offered: effective level at or below maxSafetyLevel, in one of `categories` (when given), aliases
// only with offerAliases, its runtime available, and no unconditional deny rule matching it.
// A call: matching permission rules decide (deny > ask > allow); with none, dangerous asks and
// safe/cautious run.

import { safetyRank, SAFETY_LEVELS, type SafetyLevel, type Tool } from "./tool.js";
import type { ToolRegistry } from "./registry.js";
import { ADD_TOOLS } from "./catalog/tool-set.js";
import { protectedWrite } from "./protected-paths.js";
import { commandMatches, parseCommandPattern, type CommandPattern } from "./command-rules.js";

import type { ApprovalReason, PermissionRule, RuleAction } from "../protocol.js";

export type { ApprovalReason, PermissionRule, RuleAction } from "../protocol.js";
export const RULE_ACTIONS: readonly RuleAction[] = ["allow", "ask", "deny"];


/** The parts of the configuration the policy reads. */
export interface PolicySettings {
  maxSafetyLevel?: SafetyLevel;
  categories?: readonly string[];
  offerAliases?: boolean;
  safetyOverrides?: Record<string, SafetyLevel>;
  categoryLevels?: Record<string, SafetyLevel>;
  permissionRules?: readonly PermissionRule[];
  readOutsideProject?: RuleAction;
}

/** What a call needs before it runs. */
export type PolicyDecision =
  | { kind: "run" }
  | { kind: "ask"; reason: ApprovalReason }
  | { kind: "deny"; rule: PermissionRule };

/** Why the user is asked: the tool's level, or a rule. */

/** A configuration the policy cannot honour; the message names the field. */
export class PolicyError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "PolicyError";
  }
}

interface CompiledRule {
  rule: PermissionRule;
  /** The primary name the rule's tool resolves to. */
  primary?: string;
  regexp?: RegExp;
  command?: CommandPattern;
}

export class ToolPolicy {
  private readonly rules: CompiledRule[];

  /**
   * Checks SETTINGS against REGISTRY and throws a PolicyError naming the first problem.
   * AVAILABLE says whether a tool's runtime can run now (Emacs capabilities).
   */
  constructor(
    readonly registry: ToolRegistry,
    readonly settings: PolicySettings = {},
    private readonly available: (tool: Tool) => boolean = () => true,
  ) {
    checkLevels("safetyOverrides", "", settings.safetyOverrides);
    checkLevels("categoryLevels", "category ", settings.categoryLevels);
    if (settings.maxSafetyLevel !== undefined && !SAFETY_LEVELS.includes(settings.maxSafetyLevel)) {
      throw new PolicyError(`maxSafetyLevel must be safe, cautious or dangerous, not ${String(settings.maxSafetyLevel)}.`);
    }
    const known = new Set(registry.categories());
    for (const c of Object.keys(settings.categoryLevels ?? {})) {
      if (!known.has(c)) throw new PolicyError(`categoryLevels: unknown category "${c}" (categories: ${[...known].sort().join(", ")}).`);
    }
    if (settings.readOutsideProject !== undefined && !RULE_ACTIONS.includes(settings.readOutsideProject)) {
      throw new PolicyError(`readOutsideProject must be allow, ask or deny, not ${String(settings.readOutsideProject)}.`);
    }
    // A level nothing takes would leave the user believing they are asked: a tool an MCP server has not
    // offered yet (mcp__SERVER__TOOL) is the one name that may not be known yet.
    for (const name of Object.keys(settings.safetyOverrides ?? {})) {
      if (registry.get(name) || name.startsWith("mcp__")) continue;
      throw new PolicyError(
        known.has(name) ? `safetyOverrides: "${name}" is a category: give its level in categoryLevels.` : `safetyOverrides: no tool is named "${name}" (categories go in categoryLevels: ${[...known].sort().join(", ")}).`,
      );
    }
    this.rules = (settings.permissionRules ?? []).map((r, i) => compileRule(r, i, registry, known));
  }

  /**
   * Whether a tool may read a file outside the project root that it finds only as it runs (the source
   * of a loaded definition, such as a library's): allow (read-only), ask the user each time, or deny.
   */
  readOutsideProject(): RuleAction {
    return this.settings.readOutsideProject ?? "ask";
  }

  /** The name of the capability: the primary tool for an alias, else the tool itself. */
  primaryName(tool: Tool): string {
    return tool.aliasOf ?? tool.name;
  }

  effectiveSafety(tool: Tool): SafetyLevel {
    const overrides = this.settings.safetyOverrides ?? {};
    const own = [overrides[tool.name], overrides[this.primaryName(tool)]].filter((l): l is SafetyLevel => l !== undefined);
    if (own.length > 0) return mostCautious(own);
    const byCategory = tool.categories.map((c) => this.settings.categoryLevels?.[c]).filter((l): l is SafetyLevel => l !== undefined);
    if (byCategory.length > 0) return mostCautious(byCategory);
    return tool.safety;
  }

  /** The tools offered to the model, in registration order. */
  offered(): Tool[] {
    return this.registry.list({ includeAliases: true }).filter((t) => this.isOffered(t));
  }

  isOffered(tool: Tool): boolean {
    const s = this.settings;
    if (tool.internal) return false;
    if (tool.aliasOf && !s.offerAliases) return false;
    if (s.maxSafetyLevel && safetyRank(this.effectiveSafety(tool)) > safetyRank(s.maxSafetyLevel)) return false;
    // add_tools is not held to the categories: it changes nothing, and brings in only tools they allow.
    if (s.categories && s.categories.length > 0 && tool.name !== ADD_TOOLS && !tool.categories.some((c) => s.categories!.includes(c))) return false;
    if (this.rules.some((r) => r.rule.action === "deny" && r.rule.argument === undefined && r.rule.command === undefined && this.ruleCovers(r, tool))) return false;
    return this.available(tool);
  }

  /** May a call of TOOL run concurrently with its neighbours (safe, and no rule could stop it)? */
  runsUnasked(tool: Tool): boolean {
    return this.effectiveSafety(tool) === "safe" && !this.rules.some((r) => r.rule.action !== "allow" && this.ruleCovers(r, tool));
  }

  /** What a call of TOOL with ARGS (already validated) needs; PROJECTROOT is what its paths are relative to. */
  decide(tool: Tool, args: Record<string, unknown>, projectRoot?: string): PolicyDecision {
    const primaryArgs = toPrimaryArgs(tool, args);
    const matching = this.rules.filter((r) => this.ruleCovers(r, tool) && argumentMatches(r, primaryArgs) && this.commandRuleMatches(r, tool, primaryArgs, projectRoot));
    const deny = matching.find((r) => r.rule.action === "deny");
    if (deny) return { kind: "deny", rule: deny.rule };
    // A protected file asks before any allow rule or level is looked at ("always allow" answers
    // only a level): only an allow rule naming the protected path itself lets it run unasked.
    const param = this.registry.get(this.primaryName(tool))?.writesFile ?? tool.writesFile;
    const target = param !== undefined && typeof primaryArgs[param] === "string" ? (primaryArgs[param] as string) : undefined;
    const guarded = target !== undefined ? protectedWrite(target, projectRoot) : undefined;
    if (guarded && !this.allowsProtected(tool, param!, target!)) {
      return { kind: "ask", reason: { kind: "protected", path: guarded.path, why: guarded.why } };
    }
    // A call that leaves its file to the tool (buffer_save with no file_path saves the buffer to the
    // file it visits, which may be .dir-locals.el) names nothing a rule could judge: it asks the same.
    if (param !== undefined && primaryArgs[param] === undefined) {
      const buffer = typeof primaryArgs.buffer_name === "string" ? `the file buffer ${JSON.stringify(primaryArgs.buffer_name)} visits` : "the file it writes";
      return { kind: "ask", reason: { kind: "protected", path: buffer, why: `the call does not name ${param}, so it may be a protected file; with ${param} given, your rules apply` } };
    }
    const ask = matching.find((r) => r.rule.action === "ask");
    if (ask) return { kind: "ask", reason: { kind: "rule", rule: ask.rule } };
    if (matching.length > 0) return { kind: "run" };
    const level = this.effectiveSafety(tool);
    return level === "dangerous" ? { kind: "ask", reason: { kind: "level", level } } : { kind: "run" };
  }

  /**
   * Whether a write of TOOL to the protected file VALUE (its argument PARAM, as the model wrote it)
   * may run unasked: only an allow rule on PARAM whose pattern is the path itself, spelled out and
   * anchored (`^\\.envrc$`), so that it matches that one path and nothing else. Whether any other
   * pattern matches only protected paths cannot be told from its spelling ("\\.md$" matches
   * AGENT-Q.md as it matches notes.md), so none allows one: "always allow", a rule for the whole
   * tool, a pattern by extension or directory, ".*" all ask.
   */
  private allowsProtected(tool: Tool, param: string, value: string): boolean {
    return this.rules.some((r) => r.rule.action === "allow" && r.rule.argument === param && r.rule.pattern !== undefined && literalPattern(r.rule.pattern) === value && this.ruleCovers(r, tool));
  }

  /**
   * Whether R's command (if it names one) matches the command of this call of TOOL. A tool that runs
   * no command is never matched by one; a call whose command cannot be read is matched by deny and ask
   * rules, never by allow rules.
   */
  private commandRuleMatches(r: CompiledRule, tool: Tool, args: Record<string, unknown>, projectRoot: string | undefined): boolean {
    const of = this.commandOf(tool);
    // Whatever rule allows with a pattern over the arguments (one naming a category, or none), it
    // never allows a command: only a rule's command words do.
    if (r.command === undefined) return !(of !== undefined && r.rule.action === "allow" && r.rule.argument !== undefined);
    if (of === undefined) return false;
    const target = of(args, projectRoot);
    if (target === undefined) return r.rule.action !== "allow";
    return commandMatches(r.command, target, r.rule.action === "allow");
  }

  private commandOf(tool: Tool): Tool["command"] {
    return this.registry.get(this.primaryName(tool))?.command ?? tool.command;
  }

  /**
   * What "always allow" remembers for this session: the capability (primary name); for a tool that
   * runs commands, that exact command alone, so that approving `make test` once never lets `rm -rf ~`
   * run unasked.
   */
  sessionKey(tool: Tool, args: Record<string, unknown>, projectRoot?: string): string | undefined {
    const of = this.commandOf(tool);
    if (of === undefined) return this.primaryName(tool);
    const primaryArgs = toPrimaryArgs(tool, args);
    // The same argv in another directory, or finding another program, is another command (./t.sh).
    const scopeOf = this.registry.get(this.primaryName(tool))?.sessionScope ?? tool.sessionScope;
    let scope: string | undefined = "";
    try {
      if (scopeOf) scope = scopeOf(primaryArgs, projectRoot);
    } catch {
      scope = undefined;
    }
    if (scope === undefined) return undefined;
    return `${this.primaryName(tool)} ${JSON.stringify(of(primaryArgs) ?? null)} ${scope}`;
  }

  /** The not-available message for NAME, naming what is available. */
  notAvailable(name: string): string {
    const offered = this.offered().map((t) => t.name);
    return `${name} is not available under the user's configuration, so it was not run. Available tools: ${offered.length ? offered.join(", ") : "none"}.`;
  }

  private ruleCovers(r: CompiledRule, tool: Tool): boolean {
    if (r.primary !== undefined && r.primary !== this.primaryName(tool)) return false;
    if (r.rule.category !== undefined && !tool.categories.includes(r.rule.category)) return false;
    return true;
  }
}

/** ARGS under the primary tool's parameter names (an alias declares its renames in argumentNames). */
export function toPrimaryArgs(tool: Tool, args: Record<string, unknown>): Record<string, unknown> {
  const renames = tool.argumentNames;
  if (!renames) return args;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(args)) out[renames[k] ?? k] = v;
  return out;
}

/** ARGS under the names TOOL declares: the inverse of toPrimaryArgs (names it does not rename stay). */
export function fromPrimaryArgs(tool: Tool, args: Record<string, unknown>): Record<string, unknown> {
  const renames = tool.argumentNames;
  if (!renames) return args;
  const back = new Map(Object.entries(renames).map(([alias, primary]) => [primary, alias]));
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(args)) out[back.get(k) ?? k] = v;
  return out;
}

/**
 * The one string PATTERN matches when it is an anchored literal (`^` text `$`, metacharacters only
 * escaped); undefined for any other pattern.
 */
export function literalPattern(pattern: string): string | undefined {
  const m = /^\^(.*)\$$/su.exec(pattern);
  if (!m) return undefined;
  let out = "";
  const body = m[1]!;
  for (let i = 0; i < body.length; i++) {
    const c = body[i]!;
    if (c === "\\") {
      const next = body[i + 1];
      // Only an escaped punctuation character is itself; \d, \w, \b, \u... are classes or codes.
      if (next === undefined || !/[\^$\\.*+?()[\]{}|\/-]/u.test(next)) return undefined;
      out += next;
      i++;
    } else if (/[\^$.*+?()[\]{}|]/u.test(c)) {
      return undefined;
    } else {
      out += c;
    }
  }
  return out;
}

function argumentMatches(r: CompiledRule, args: Record<string, unknown>): boolean {
  if (r.rule.argument === undefined || r.regexp === undefined) return true;
  if (!Object.prototype.hasOwnProperty.call(args, r.rule.argument)) return false;
  const value = args[r.rule.argument];
  const text = typeof value === "string" ? value : JSON.stringify(value);
  return r.regexp.test(text ?? "");
}

function compileRule(rule: PermissionRule, i: number, registry: ToolRegistry, categories: Set<string>): CompiledRule {
  const where = `permissionRules[${i}]`;
  if (rule === null || typeof rule !== "object" || Array.isArray(rule)) throw new PolicyError(`${where} must be an object with an action.`);
  if (!RULE_ACTIONS.includes(rule.action)) {
    throw new PolicyError(`${where}: action must be allow, ask or deny, not ${JSON.stringify(rule.action)}.`);
  }
  for (const field of ["tool", "category", "argument", "pattern", "command"] as const) {
    if (rule[field] !== undefined && typeof rule[field] !== "string") throw new PolicyError(`${where}: ${field} must be a string.`);
  }
  const compiled: CompiledRule = { rule: { ...rule } };
  let tool: Tool | undefined;
  if (rule.tool !== undefined) {
    tool = registry.get(rule.tool);
    if (!tool) throw new PolicyError(`${where}: no tool is named "${rule.tool}".`);
    compiled.primary = tool.aliasOf ?? tool.name;
  }
  if (rule.category !== undefined && !categories.has(rule.category)) {
    throw new PolicyError(`${where}: unknown category "${rule.category}" (categories: ${[...categories].sort().join(", ")}).`);
  }
  if ((rule.argument === undefined) !== (rule.pattern === undefined)) {
    throw new PolicyError(`${where}: argument and pattern go together (the rule matches when that argument matches the pattern).`);
  }
  if (rule.command !== undefined) {
    if (rule.argument !== undefined) throw new PolicyError(`${where}: give command or argument and pattern, not both.`);
    if (tool && !(registry.get(compiled.primary!) ?? tool).command) throw new PolicyError(`${where}: ${rule.tool} runs no command, so a rule naming a command cannot match it.`);
    try {
      compiled.command = parseCommandPattern(rule.command);
    } catch (err) {
      throw new PolicyError(`${where}: command ${JSON.stringify(rule.command)}: ${(err as Error).message}.`);
    }
  }
  // A regexp over a command's arguments cannot tell an argument from a command (`make test; rm -rf ~`
  // is one argv element, or a shell line): commands are allowed by their words alone.
  if (rule.action === "allow" && rule.argument !== undefined && tool && (registry.get(compiled.primary!) ?? tool).command) {
    throw new PolicyError(`${where}: an allow rule for ${rule.tool} names the command with command (e.g. "make test*"), not a pattern over its arguments.`);
  }
  if (rule.argument !== undefined) {
    if (tool) {
      const primary = registry.get(compiled.primary!) ?? tool;
      // A parameter's other name (argumentNames) is matched as the name calls are checked under.
      const renamed = tool.argumentNames?.[rule.argument] ?? primary.argumentNames?.[rule.argument];
      if (renamed !== undefined) compiled.rule.argument = renamed;
      const params = Object.keys(primary.schema.properties);
      if (!params.includes(compiled.rule.argument!)) {
        throw new PolicyError(`${where}: "${rule.argument}" is not a parameter of ${primary.name} (parameters: ${params.join(", ") || "none"}).`);
      }
    }
    try {
      compiled.regexp = new RegExp(rule.pattern!, "u");
    } catch (err) {
      throw new PolicyError(`${where}: pattern ${JSON.stringify(rule.pattern)} is not a valid JavaScript regular expression: ${(err as Error).message}.`);
    }
  }
  return compiled;
}

/** FIELD's levels must be known; KIND ("category ") names what its keys are in the message. */
function checkLevels(field: string, kind: string, levels: Record<string, SafetyLevel> | undefined): void {
  if (levels === undefined) return;
  if (levels === null || typeof levels !== "object" || Array.isArray(levels)) throw new PolicyError(`${field} must be an object of levels.`);
  const bad = Object.entries(levels).filter(([, v]) => !SAFETY_LEVELS.includes(v));
  if (bad.length > 0) {
    throw new PolicyError(`Unknown safety level for ${bad.map(([k, v]) => `${kind}${k}: ${String(v)}`).join(", ")}; use safe, cautious or dangerous.`);
  }
}

function mostCautious(levels: readonly SafetyLevel[]): SafetyLevel {
  return levels.reduce((a, b) => (safetyRank(b) > safetyRank(a) ? b : a));
}
