//! The stand-in API server as a process, for tests in other languages (the official Python client
//! in tests/python): `kube-standin --listen 127.0.0.1:PORT --namespaces a,b [--bind-pending]`.
//! With `--bind-pending` a PV controller binds every Pending claim within 100 ms. It prints
//! `kube-standin: listening on http://…` once it serves, and runs until killed.

use std::time::Duration;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let mut listen = "127.0.0.1:0".to_string();
    let mut namespaces = vec!["default".to_string()];
    let mut bind_pending = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next()) {
            ("--listen", Some(v)) => listen = v,
            ("--namespaces", Some(v)) => namespaces = v.split(',').map(str::to_string).collect(),
            ("--bind-pending", next) => {
                bind_pending = true;
                if let Some(v) = next {
                    eprintln!("kube-standin: unexpected {v:?} after --bind-pending");
                    return std::process::ExitCode::from(2);
                }
            }
            (other, _) => {
                eprintln!(
                    "kube-standin: unknown or incomplete argument {other:?}; usage: kube-standin --listen ADDR --namespaces a,b [--bind-pending]"
                );
                return std::process::ExitCode::from(2);
            }
        }
    }
    let listener = match tokio::net::TcpListener::bind(&listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("kube-standin: cannot listen on {listen}: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    let names: Vec<&str> = namespaces.iter().map(String::as_str).collect();
    let standin = kube_standin::StandIn::start_on(listener, &names);
    println!("kube-standin: listening on {}", standin.url);
    loop {
        if bind_pending {
            for ns in &namespaces {
                standin.bind_pending(ns);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
