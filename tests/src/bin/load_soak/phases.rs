//! The two ways the mix is sent: the capacity run, closed-loop from `CONNECTIONS` callers, and the
//! soak, paced open-loop at a target rate by a pacer that never slows down for the stack.
//!
//! Apart because the timing is the part of the suite that decides what a result means (a closed
//! loop measures, an open loop holds the stack to a rate), and it reads best without the
//! operations or the checks around it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

use crate::mix::Driver;
use crate::{CONNECTIONS, LATE, PACER_TICK, POOL};

/// The capacity run: `CONNECTIONS` callers, each sending the next operation as soon as the last
/// was answered. Returns completed operations per second.
pub(crate) async fn capacity(driver: &Arc<Driver>, run: Duration) -> f64 {
    let started = Instant::now();
    let callers: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            let driver = driver.clone();
            tokio::spawn(async move {
                while started.elapsed() < run {
                    driver.one().await;
                }
            })
        })
        .collect();
    for c in callers {
        let _ = c.await;
    }
    let ops = driver.tally.lock().expect("tally").ops();
    ops as f64 / started.elapsed().as_secs_f64()
}

/// How the pacer did.
#[derive(Default)]
pub(crate) struct Pace {
    pub(crate) dispatched: u64,
    /// Due when every worker was busy: not sent.
    pub(crate) dropped: u64,
    /// Dispatched over `LATE` after their due time.
    pub(crate) late: u64,
    pub(crate) elapsed: Duration,
}

/// The soak's pacer: operation `n` is due at `n / rate` seconds; every `PACER_TICK` everything due
/// by now goes to a free worker, or is dropped when none is free.
pub(crate) async fn soak(driver: &Arc<Driver>, rate: f64, run: Duration) -> Pace {
    let workers = Arc::new(Semaphore::new(POOL));
    let started = Instant::now();
    let mut tick = tokio::time::interval(PACER_TICK);
    // The due count comes from the clock, so a missed tick is caught up on the next one.
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut p = Pace::default();
    loop {
        tick.tick().await;
        let now = started.elapsed();
        if now >= run {
            break;
        }
        let due = (now.as_secs_f64() * rate) as u64;
        while p.dispatched + p.dropped < due {
            let n = p.dispatched + p.dropped;
            if now.as_secs_f64() - n as f64 / rate > LATE.as_secs_f64() {
                p.late += 1;
            }
            match workers.clone().try_acquire_owned() {
                Ok(worker) => {
                    let driver = driver.clone();
                    tokio::spawn(async move {
                        driver.one().await;
                        drop(worker);
                    });
                    p.dispatched += 1;
                }
                Err(_) => p.dropped += 1,
            }
        }
    }
    p.elapsed = started.elapsed();
    // The operations still running finish before the tally is read.
    let _ = workers.acquire_many(POOL as u32).await;
    p
}
