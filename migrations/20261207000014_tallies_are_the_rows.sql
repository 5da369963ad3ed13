-- campaign_tallies.sent is the campaign's sent rows, in the work table and archived, whatever
-- made them sent (src/store/brake.rs). `resolve --assume-sent` did not add its rows before
-- this release, so a tally could be short of them and the brake weigh a complaint against too
-- few mails: one repair from the rows, once, at upgrade (a scan of the `sent` rows).
INSERT INTO campaign_tallies AS c (campaign_id, sent)
SELECT campaign_id, sum(n)
  FROM (SELECT campaign_id, count(*) AS n FROM campaign_targets WHERE state = 'sent' GROUP BY 1
        UNION ALL
        SELECT campaign_id, count(*) FROM campaign_archive WHERE outcome = 'sent' GROUP BY 1) rows
 GROUP BY campaign_id
ON CONFLICT (campaign_id) DO UPDATE SET sent = excluded.sent
 WHERE c.sent IS DISTINCT FROM excluded.sent;
