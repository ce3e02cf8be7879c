-- The usual tally of a claim's recurring schedules (:ids): one tick fired on time each,
-- one statement for all.
UPDATE schedules SET tick_count = schedules.tick_count + 1
WHERE schedules.id IN :ids
