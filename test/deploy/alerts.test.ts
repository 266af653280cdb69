import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, describe, test } from 'node:test';
import { parse as parseYaml } from 'yaml';
import { rulesOf, type Rule } from '../support/promql.js';

/**
 * deploy/prometheus: the alert rules checked and unit-tested by Prometheus's own promtool (Debian's
 * `prometheus` package), and read as YAML for what promtool does not check: every alert's severity and
 * runbook, and a unit test of each alert both firing and staying quiet.
 */

const root = fileURLToPath(new URL('../../', import.meta.url));
const dir = join(root, 'deploy/prometheus');
const rulesPath = join(dir, 'alerts.yml');
const unitTestsPath = join(dir, 'alerts.test.yml');
const alerts = rulesOf(readFileSync(rulesPath, 'utf8')).filter((r): r is Rule & { alert: string } => r.alert !== undefined);

const promtool = spawnSync('promtool', ['--version'], { encoding: 'utf8' }).status === 0;
if (process.env.REQUIRE_PROMTOOL === '1' && !promtool) {
  throw new Error('REQUIRE_PROMTOOL=1 but promtool is not installed (Debian package prometheus): the rule checks would be skipped');
}

function run(...args: string[]): { status: number | null; output: string } {
  const result = spawnSync('promtool', args, { cwd: root, encoding: 'utf8', timeout: 120_000 });
  return { status: result.status, output: `${result.stdout}${result.stderr}` };
}

describe('promtool on deploy/prometheus', { skip: promtool ? false : 'promtool is not installed (apt-get install prometheus)' }, () => {
  const scratch = mkdtempSync(join(tmpdir(), 'alerts-'));
  after(() => rmSync(scratch, { recursive: true, force: true }));

  test('promtool check rules: alerts.yml is valid, every rule found', () => {
    const { status, output } = run('check', 'rules', rulesPath);
    assert.equal(status, 0, output);
    assert.match(output, new RegExp(`SUCCESS: ${alerts.length} rules found`));
  });

  test('promtool test rules: every unit test of alerts.test.yml passes (each alert fires at its time, stays quiet where it should)', () => {
    const { status, output } = run('test', 'rules', unitTestsPath);
    assert.equal(status, 0, output);
    assert.match(output, /SUCCESS/);
    assert.doesNotMatch(output, /FAILED/);
  });

  test("promtool check config: the compose stack's prometheus.yml, and the rules it loads", () => {
    const { status, output } = run('check', 'config', join(dir, 'prometheus.yml'));
    assert.equal(status, 0, output);
    assert.match(output, /SUCCESS: 1 rule files found/);
    assert.match(output, new RegExp(`SUCCESS: ${alerts.length} rules found`));
  });

  test('the unit tests catch a rule that fires too early: promtool test rules fails on it, naming the alert', () => {
    // The same tests against rules whose one `for:` is shorter than the tests expect.
    const text = readFileSync(rulesPath, 'utf8');
    const mutated = text.replace(/(- alert: BookstoreSideEffectPastLease\n(?:.*\n)*?\s+for: )10m/, '$15m');
    assert.notEqual(mutated, text, 'the mutation applied');
    writeFileSync(join(scratch, 'alerts.yml'), mutated);
    copyFileSync(unitTestsPath, join(scratch, 'alerts.test.yml'));
    const { status, output } = run('test', 'rules', join(scratch, 'alerts.test.yml'));
    assert.notEqual(status, 0, output);
    assert.match(output, /FAILED/);
    assert.match(output, /alertname: BookstoreSideEffectPastLease/);
    assert.doesNotMatch(output, /alertname: BookstoreReplicaDown/, 'the other alerts still pass');
  });
});

interface AlertRuleTest {
  eval_time: string;
  alertname: string;
  exp_alerts?: { exp_labels?: Record<string, string>; exp_annotations?: Record<string, string> }[];
}
interface UnitTests {
  rule_files: string[];
  evaluation_interval: string;
  tests: { name: string; interval: string; alert_rule_test?: AlertRuleTest[] }[];
}

/** Minutes of a Prometheus duration such as 90s, 10m or 1h (the forms these files use). */
function minutes(duration: string): number {
  const match = /^(\d+)(s|m|h)$/.exec(duration);
  assert.ok(match !== null, `a duration this test reads: ${duration}`);
  return Number(match[1]) * { s: 1 / 60, m: 1, h: 60 }[match[2] as 's' | 'm' | 'h'];
}

/** GitHub's anchor of a Markdown heading. */
function anchor(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^a-z0-9 _-]/g, '')
    .replace(/ /g, '-');
}

describe('deploy/prometheus/alerts.yml, read as YAML', () => {
  const operations = readFileSync(join(root, 'docs/operations.md'), 'utf8');
  const anchors = new Set([...operations.matchAll(/^#{1,6} (.+)$/gm)].map((m) => anchor(m[1]!)));
  const unitTests = parseYaml(readFileSync(unitTestsPath, 'utf8')) as UnitTests;
  const prometheusConfig = parseYaml(readFileSync(join(dir, 'prometheus.yml'), 'utf8')) as {
    rule_files: string[];
    scrape_configs: { job_name: string }[];
  };

  test('the alerts the issue asks for are all there, each named once', () => {
    const names = alerts.map((a) => a.alert);
    assert.equal(new Set(names).size, names.length, `duplicate alert names: ${names.join(', ')}`);
    for (const expected of [
      'BookstoreSideEffectPastLease',
      'BookstoreDeadLetters',
      'BookstoreOutboxStalled',
      'BookstoreCommandsOverloaded',
      'BookstoreDatabaseBusy',
      'BookstoreRelayDisconnected',
      'BookstoreReplicaDown',
      'BookstoreReplicaNotReady',
      'BookstoreNoReadyReplica',
    ]) {
      assert.ok(names.includes(expected), `${expected} is missing from ${names.join(', ')}`);
    }
  });

  for (const rule of alerts) {
    test(`${rule.alert}: a severity, a summary, a description and a runbook_url into its section of docs/operations.md`, () => {
      assert.ok(['warning', 'critical'].includes(rule.labels?.severity ?? ''), `severity: ${rule.labels?.severity}`);
      assert.ok((rule.annotations?.summary ?? '').length > 10, 'summary');
      assert.ok((rule.annotations?.description ?? '').length > 40, 'description');
      const runbook = rule.annotations?.runbook_url ?? '';
      assert.equal(runbook, `docs/operations.md#${rule.alert.toLowerCase()}`);
      assert.ok(anchors.has(rule.alert.toLowerCase()), `docs/operations.md has no heading "${rule.alert}"`);
      const section = operations.split(/^#{1,6} /m).find((s) => s.startsWith(`${rule.alert}\n`)) ?? '';
      assert.ok(section.length > 300, `the section ${rule.alert} says what it means, what to look at and what to do`);
    });

    test(`${rule.alert}: unit-tested firing, one evaluation after staying quiet within its for: ${rule.for ?? '0m'}, and staying quiet elsewhere`, () => {
      const step = minutes(unitTests.evaluation_interval);
      const cases = unitTests.tests.flatMap((t) =>
        (t.alert_rule_test ?? []).filter((c) => c.alertname === rule.alert).map((c) => ({ ...c, test: t })),
      );
      const firing = cases.filter((c) => (c.exp_alerts ?? []).length > 0);
      const quiet = cases.filter((c) => (c.exp_alerts ?? []).length === 0);
      assert.ok(firing.length > 0, 'no unit test shows it firing');
      assert.ok(quiet.length > 0, 'no unit test shows it quiet');
      if (rule.for !== undefined && minutes(rule.for) > 0) {
        // The time is pinned: in the test that first shows it firing, it was still quiet one evaluation earlier.
        const first = firing[0]!;
        const at = minutes(first.eval_time);
        assert.ok(
          quiet.some((q) => q.test === first.test && minutes(q.eval_time) === at - step),
          `${first.test.name}: no evaluation at ${at - step}m showing it quiet just before it fires at ${at}m`,
        );
      }
      for (const c of firing) {
        for (const expected of c.exp_alerts!) {
          assert.equal(expected.exp_labels?.severity, rule.labels?.severity, `${c.test.name}: the severity label`);
          assert.equal(expected.exp_annotations?.runbook_url, rule.annotations?.runbook_url, `${c.test.name}: the runbook`);
        }
      }
    });
  }

  test('the unit tests load alerts.yml itself, and prometheus.yml loads it too', () => {
    assert.deepEqual(unitTests.rule_files, ['alerts.yml']);
    assert.deepEqual(prometheusConfig.rule_files, ['alerts.yml']);
  });

  test('the job the rules select is the job prometheus.yml scrapes the replicas under', () => {
    const jobs = new Set(alerts.flatMap((a) => [...a.expr.matchAll(/\bjob="([^"]+)"/g)].map((m) => m[1]!)));
    for (const a of alerts) if (a.labels?.job !== undefined) jobs.add(a.labels.job);
    assert.deepEqual(
      [...jobs],
      prometheusConfig.scrape_configs.map((c) => c.job_name),
    );
  });
});
