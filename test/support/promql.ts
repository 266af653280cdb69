import { parser } from '@prometheus-io/lezer-promql';
import { parse as parseYaml } from 'yaml';

/**
 * Alert rules read against what the service exports: every vector selector of a rule's expression is
 * parsed with Prometheus's own PromQL grammar (lezer-promql, the one its UI uses), and its metric name,
 * label names and label values are looked up in a /metrics exposition.
 */

export interface LabelMatcher {
  label: string;
  op: '=' | '!=' | '=~' | '!~';
  value: string;
}

export interface VectorSelector {
  metric: string;
  matchers: LabelMatcher[];
}

/** What an expression names: its vector selectors, and the labels of its by/without/on/ignoring/group_x clauses. */
export interface ExpressionNames {
  selectors: VectorSelector[];
  groupingLabels: string[];
}

/** A PromQL string literal's value: "double" and 'single' quoted with escapes, `raw` without. */
function stringValue(literal: string): string {
  if (literal.startsWith('`')) return literal.slice(1, -1);
  if (literal.startsWith("'")) return JSON.parse(`"${literal.slice(1, -1).replace(/\\'/g, "'").replace(/"/g, '\\"')}"`) as string;
  return JSON.parse(literal) as string;
}

/** The selectors and grouping labels of one PromQL expression; throws on a syntax error. */
export function namesIn(expr: string): ExpressionNames {
  const tree = parser.parse(expr);
  const text = (node: { from: number; to: number } | null): string => (node === null ? '' : expr.slice(node.from, node.to));
  const selectors: VectorSelector[] = [];
  const groupingLabels: string[] = [];
  let errorAt: number | undefined;
  tree.iterate({
    enter(ref) {
      if (ref.type.isError) errorAt ??= ref.from;
      if (ref.name === 'VectorSelector') {
        const node = ref.node;
        const metric = text(node.getChild('Identifier'));
        const matchers = (node.getChild('LabelMatchers')?.getChildren('UnquotedLabelMatcher') ?? []).map((m) => ({
          label: text(m.getChild('LabelName')),
          op: text(m.getChild('MatchOp')) as LabelMatcher['op'],
          value: stringValue(text(m.getChild('StringLiteral'))),
        }));
        // A selector by {__name__=…} or a quoted name would name no metric here: not what the rules do.
        if (metric === '' || (node.getChild('LabelMatchers')?.getChildren('QuotedLabelMatcher') ?? []).length > 0) {
          throw new Error(`a selector this check cannot read: ${text(node)}`);
        }
        selectors.push({ metric, matchers });
      }
      if (ref.name === 'GroupingLabels') groupingLabels.push(...ref.node.getChildren('LabelName').map(text));
    },
  });
  if (errorAt !== undefined) throw new Error(`PromQL syntax error at character ${errorAt} of: ${expr}`);
  return { selectors, groupingLabels };
}

/** The series of a Prometheus text exposition: for each metric name, the label sets of its samples. */
export function exportedSeries(text: string): Map<string, Record<string, string>[]> {
  const series = new Map<string, Record<string, string>[]>();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? \S+(?: \d+)?$/.exec(line);
    if (match === null) throw new Error(`not an exposition sample line: ${line}`);
    const labels: Record<string, string> = {};
    for (const pair of (match[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
      labels[pair[1]!] = pair[2]!.replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c));
    }
    series.set(match[1]!, [...(series.get(match[1]!) ?? []), labels]);
  }
  return series;
}

export interface Rule {
  alert?: string;
  record?: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

/** The rules of a Prometheus rule file, in order. */
export function rulesOf(yamlText: string): Rule[] {
  const file = parseYaml(yamlText) as { groups: { name: string; rules: Rule[] }[] };
  return file.groups.flatMap((group) => group.rules);
}

export interface NameCheckOptions {
  /** Series Prometheus makes itself (not the service), with their labels: `up`. */
  prometheusSeries: Record<string, string[]>;
  /** Labels Prometheus attaches to every scraped series (job, instance): on no line of /metrics. */
  targetLabels: string[];
}

/**
 * Every name a rule uses that the exposition does not have: a metric, a label of a selector, a value of
 * an equality or regex matcher (no series would match), a label of a by/on clause or of `$labels.x` in
 * a template that none of the expression's metrics carries. One line per problem; none: [].
 */
export function unknownNames(
  rules: readonly Rule[],
  exposition: Map<string, Record<string, string>[]>,
  options: NameCheckOptions,
): string[] {
  const problems: string[] = [];
  for (const rule of rules) {
    const name = rule.alert ?? rule.record ?? '(unnamed rule)';
    const { selectors, groupingLabels } = namesIn(rule.expr);
    const labelsInExpr = new Set(options.targetLabels);
    let metricUnknown = false;
    for (const { metric, matchers } of selectors) {
      const ownLabels = options.prometheusSeries[metric];
      const series = exposition.get(metric);
      if (ownLabels === undefined && series === undefined) {
        problems.push(`${name}: metric ${metric} is not exported`);
        metricUnknown = true;
        continue;
      }
      const labelNames = new Set(ownLabels ?? series!.flatMap((s) => Object.keys(s)));
      for (const label of labelNames) labelsInExpr.add(label);
      for (const { label, op, value } of matchers) {
        if (options.targetLabels.includes(label)) continue;
        if (!labelNames.has(label)) {
          problems.push(`${name}: ${metric} has no label ${label}`);
          continue;
        }
        const values = new Set((series ?? []).map((s) => s[label]).filter((v) => v !== undefined));
        if (op === '=' && !values.has(value)) {
          problems.push(`${name}: no ${metric} series has ${label}="${value}" (exported: ${[...values].join(', ')})`);
        }
        if (op === '=~' && ![...values].some((v) => new RegExp(`^(?:${value})$`).test(v))) {
          problems.push(`${name}: no ${metric} series has a ${label} matching ${value}`);
        }
      }
    }
    // An unknown metric's labels are unknown too: its expression's grouping and template labels are not judged.
    if (metricUnknown) continue;
    for (const label of groupingLabels) {
      if (!labelsInExpr.has(label)) problems.push(`${name}: grouping label ${label} is on none of the expression's series`);
    }
    for (const template of Object.values(rule.annotations ?? {})) {
      for (const [, label] of template.matchAll(/\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)/g)) {
        if (!labelsInExpr.has(label!)) problems.push(`${name}: template label $labels.${label} is on none of the expression's series`);
      }
    }
  }
  return problems;
}
