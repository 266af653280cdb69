/// <reference lib="dom" />
import { html } from 'htm/preact';
import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';
import type { Overview } from './api-types.js';

const COLOURS: Record<string, string> = {
  processed: '#2e7d32',
  duplicate: '#1565c0',
  refused: '#ef6c00',
  overloaded: '#6a1b9a',
  failed: '#c62828',
  requeued: '#00838f',
};

/** A uPlot chart that follows its data. */
function Plot(props: {
  title: string;
  series: { label: string; stroke: string; dots?: boolean }[];
  data: uPlot.AlignedData;
  yLabel: string;
}) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  useEffect(() => {
    const el = box.current;
    if (el === null) return;
    // As wide as its card, whatever the screen: followed as the card's width changes.
    const width = () => Math.max(1, el.clientWidth);
    plot.current = new uPlot(
      {
        width: width(),
        height: 220,
        series: [
          {},
          // A series with gaps (no batch in an interval) is drawn across them, its points marked.
          ...props.series.map((s) => ({ label: s.label, stroke: s.stroke, width: 2, spanGaps: true, points: { show: s.dots === true } })),
        ],
        axes: [{}, { label: props.yLabel }],
        legend: { live: false },
      },
      props.data,
      el,
    );
    const resized = new ResizeObserver(() => {
      if (plot.current !== null && plot.current.width !== width()) plot.current.setSize({ width: width(), height: 220 });
    });
    resized.observe(el);
    return () => {
      resized.disconnect();
      plot.current?.destroy();
      plot.current = null;
    };
  }, [props.series.map((s) => s.label).join()]);
  useEffect(() => {
    plot.current?.setData(props.data);
  }, [props.data]);
  return html`<figure class="plot">
    <figcaption>${props.title}</figcaption>
    <div ref=${box} role="img" aria-label=${props.title}></div>
  </figure>`;
}

/** Commands per second by outcome, and group-commit batches, over the minutes the overview holds. */
export function ActivityChart({ overview }: { overview: Overview }) {
  const { series } = overview.activity;
  // The last point is the interval running now: too short a one would plot a spike.
  const points = overview.activity.points.filter((p, i, all) => i < all.length - 1 || p.seconds >= 1);
  const x = points.map((p) => Date.parse(p.at) / 1000);
  const perSecond = (n: number, seconds: number) => (seconds > 0 ? n / seconds : 0);
  const commands: uPlot.AlignedData = [x, ...series.map((s) => points.map((p) => perSecond(p.commands[s] ?? 0, p.seconds)))];
  const batches: uPlot.AlignedData = [
    x,
    points.map((p) => (p.batches > 0 ? p.batchedCommands / p.batches : null)),
    points.map((p) => perSecond(p.batches, p.seconds)),
  ];
  return html`<div class="plots">
    <${Plot}
      title="Commands per second by outcome"
      yLabel="per second"
      series=${series.map((s) => ({ label: s, stroke: COLOURS[s] ?? '#555' }))}
      data=${commands}
    />
    <${Plot}
      title="Group commit: average batch size and batches per second"
      yLabel="commands / batches"
      series=${[
        { label: 'average batch size', stroke: '#1565c0', dots: true },
        { label: 'batches per second', stroke: '#ef6c00' },
      ]}
      data=${batches}
    />
  </div>`;
}
