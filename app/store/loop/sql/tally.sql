-- A recurring schedule's (:s_id) tally of a claim, run for each that is not one tick fired
-- on time: :s_ticks ticks, :s_unfired firings taken back (their occurrences were dropped
-- unfired), :s_skipped ticks skipped, the latest skip's reason (:s_reason, if any).
UPDATE schedules SET
    tick_count = schedules.tick_count + :s_ticks,
    fire_count = schedules.fire_count - :s_unfired,
    skipped_count = schedules.skipped_count + :s_skipped,
    last_skip_reason = coalesce(:s_reason, schedules.last_skip_reason)
WHERE schedules.id = :s_id
