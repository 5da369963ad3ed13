// k6 scenarios against fake-provider, so we know the fake is never the bottleneck of our runs
// and that its rate limit behaves like the real provider's. Run with scripts/k6.sh, which starts
// a fake per mode on 127.0.0.1 and passes BASE:
//   MODE=ceiling      fake with no limit, no latency: open-model load at RATE (default 2000/s);
//                     thresholds: no errors, p99 < 50 ms, (almost) no dropped iterations.
//   MODE=at-limit     fake limited to 500/s burst 20, load at 480/s: < 1 % answered 429.
//   MODE=above-limit  same fake, load at 1000/s: about half answered 429, every 429 carries
//                     Retry-After, and accepted requests stay at the limit (+ burst).
import http from 'k6/http';
import { check } from 'k6';
import { Counter, Rate } from 'k6/metrics';

const MODE = __ENV.MODE || 'ceiling';
const BASE = __ENV.BASE || 'http://127.0.0.1:8080';
const DURATION = __ENV.DURATION || '10s';
const defaults = { 'ceiling': 2000, 'at-limit': 480, 'above-limit': 1000 };
const RATE = parseInt(__ENV.RATE || String(defaults[MODE]), 10);

const throttled = new Rate('throttled');
const retryAfterPresent = new Rate('retry_after_present');
const accepted = new Counter('accepted');

const thresholds = {
  'ceiling': {
    http_req_failed: ['rate<0.001'],
    http_req_duration: ['p(99)<50'],
    dropped_iterations: [`count<${Math.ceil(RATE * 0.02 * 10)}`],
  },
  'at-limit': {
    throttled: ['rate<0.01'],
  },
  'above-limit': {
    throttled: ['rate>0.40', 'rate<0.60'],
    retry_after_present: ['rate==1'],
    // 500/s + a burst of 20 over the 10 s run; the counter's rate is over the whole test.
    accepted: ['rate<=525'],
  },
}[MODE];

export const options = {
  scenarios: {
    load: {
      executor: 'constant-arrival-rate',
      rate: RATE,
      timeUnit: '1s',
      duration: DURATION,
      preAllocatedVUs: Math.min(400, Math.ceil(RATE / 10)),
      maxVUs: 800,
    },
  },
  thresholds,
  summaryTrendStats: ['avg', 'p(50)', 'p(95)', 'p(99)', 'max'],
};

export default function () {
  const member = __VU * 1000000 + __ITER;
  const res = http.post(
    `${BASE}/v1/send`,
    JSON.stringify({ to: `k6-${member}@example.com`, member_id: member, template: 'k6' }),
    {
      headers: { 'Content-Type': 'application/json', 'Idempotency-Key': `k6:${member}` },
      // 429 is an expected answer here, not a failed request.
      responseCallback: http.expectedStatuses(200, 429),
    },
  );
  const is429 = res.status === 429;
  throttled.add(is429);
  if (is429) {
    retryAfterPresent.add(res.headers['Retry-After'] !== undefined);
  } else {
    accepted.add(1);
  }
  check(res, { 'status is 200 or 429': (r) => r.status === 200 || r.status === 429 });
}
