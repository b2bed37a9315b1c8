//! Server bootstrap over real sockets on 127.0.0.1:0: gRPC health (SERVING only once the
//! caches synced), reflection v1 and v1alpha, the decode limit, graceful shutdown, and the
//! admin server's /livez, /readyz and /metrics.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

use std::net::SocketAddr;
use std::time::Duration;

use flotilla_runtime::admin::serve_admin;
use flotilla_runtime::reflector::Writer;
use flotilla_runtime::server::{
    GrpcConfig, GrpcServer, MAX_DECODING_MESSAGE_SIZE, Readiness, bind,
};
use flotilla_runtime::telemetry::install_metrics;
use flotilla_runtime::testing::stop_task;
use flotilla_runtime::watcher::Event;
use flotilla_runtime::{QueueConfig, Shutdown, WorkQueue};
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

/// A descriptor set with one service, `flotilla.test.Probe`, standing in for
/// `flotilla_proto::FILE_DESCRIPTOR_SET`.
fn test_descriptor_set() -> &'static [u8] {
    let set = prost_types::FileDescriptorSet {
        file: vec![prost_types::FileDescriptorProto {
            name: Some("flotilla/test/probe.proto".into()),
            package: Some("flotilla.test".into()),
            service: vec![prost_types::ServiceDescriptorProto {
                name: Some("Probe".into()),
                ..Default::default()
            }],
            syntax: Some("proto3".into()),
            ..Default::default()
        }],
    };
    Box::leak(set.encode_to_vec().into_boxed_slice())
}

async fn connect(addr: SocketAddr) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap()
}

async fn status(
    client: &mut HealthClient<Channel>,
    service: &str,
) -> Result<ServingStatus, tonic::Status> {
    let resp = client
        .check(HealthCheckRequest {
            service: service.into(),
        })
        .await?;
    Ok(ServingStatus::try_from(resp.into_inner().status).unwrap())
}

/// `$name(channel)`: the service names listed by the reflection API `$v` (v1 or v1alpha:
/// the same messages in two packages).
macro_rules! list_services {
    ($name:ident, $v:ident) => {
        async fn $name(channel: Channel) -> Vec<String> {
            use tonic_reflection::pb::$v::ServerReflectionRequest;
            use tonic_reflection::pb::$v::server_reflection_client::ServerReflectionClient;
            use tonic_reflection::pb::$v::server_reflection_request::MessageRequest;
            use tonic_reflection::pb::$v::server_reflection_response::MessageResponse;
            let req = ServerReflectionRequest {
                host: String::new(),
                message_request: Some(MessageRequest::ListServices(String::new())),
            };
            let mut stream = ServerReflectionClient::new(channel)
                .server_reflection_info(tokio_stream::iter(vec![req]))
                .await
                .unwrap()
                .into_inner();
            match stream.message().await.unwrap().unwrap().message_response {
                Some(MessageResponse::ListServicesResponse(list)) => {
                    let mut names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
                    names.sort();
                    names
                }
                other => panic!("unexpected reflection answer {other:?}"),
            }
        }
    };
}

list_services!(list_v1, v1);
list_services!(list_v1alpha, v1alpha);

#[tokio::test]
async fn grpc_server_serves_health_once_synced_and_reflection_v1_and_v1alpha() {
    let shutdown = Shutdown::new();
    let mut writer = Writer::<String>::new();
    let readiness = Readiness::new();
    readiness.add_cache("bindings", &writer.cache());
    let server = GrpcServer::new(
        &[test_descriptor_set()],
        GrpcConfig::default().health_service("flotilla.test.Probe"),
        readiness,
        &shutdown,
    )
    .await
    .unwrap();
    let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let serving = tokio::spawn(server.serve(listener, shutdown.clone()));
    let channel = connect(addr).await;
    let mut health = HealthClient::new(channel.clone());

    assert_eq!(
        status(&mut health, "").await.unwrap(),
        ServingStatus::NotServing
    );
    assert_eq!(
        status(&mut health, "flotilla.test.Probe").await.unwrap(),
        ServingStatus::NotServing
    );
    assert_eq!(
        status(&mut health, "flotilla.test.Other")
            .await
            .unwrap_err()
            .code(),
        tonic::Code::NotFound
    );

    // The cache syncs: health follows.
    writer.apply_watcher_event(&Event::Init { revision: 5 });
    writer.apply_watcher_event(&Event::InitDone { revision: 5 });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while status(&mut health, "").await.unwrap() != ServingStatus::Serving {
        assert!(
            tokio::time::Instant::now() < deadline,
            "health never turned SERVING"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        status(&mut health, "flotilla.test.Probe").await.unwrap(),
        ServingStatus::Serving
    );

    let expected = vec![
        "flotilla.test.Probe".to_owned(),
        "grpc.health.v1.Health".to_owned(),
        "grpc.reflection.v1.ServerReflection".to_owned(),
    ];
    assert_eq!(list_v1(channel.clone()).await, expected);
    let alpha = list_v1alpha(channel.clone()).await;
    assert!(
        alpha.contains(&"flotilla.test.Probe".to_owned()),
        "{alpha:?}"
    );
    assert!(
        alpha.contains(&"grpc.health.v1.Health".to_owned()),
        "{alpha:?}"
    );
    assert!(
        alpha.contains(&"grpc.reflection.v1alpha.ServerReflection".to_owned()),
        "{alpha:?}"
    );

    // Requests are decoded up to 1.5 MiB, not tonic's default 4 MiB.
    let just_under = "x".repeat(MAX_DECODING_MESSAGE_SIZE - 64);
    assert_eq!(
        status(&mut health, &just_under).await.unwrap_err().code(),
        tonic::Code::NotFound
    );
    let over = "x".repeat(MAX_DECODING_MESSAGE_SIZE + 1);
    assert_eq!(
        status(&mut health, &over).await.unwrap_err().code(),
        tonic::Code::OutOfRange
    );

    stop_task(
        &shutdown,
        Duration::from_secs(10),
        serving,
        "graceful shutdown in time",
    )
    .await;
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "the listener is closed"
    );
}

/// A minimal HTTP/1.1 GET: (status code, body).
async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut raw))
        .await
        .expect("response in time")
        .unwrap();
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("a complete response");
    let code = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (code, body.to_owned())
}

#[tokio::test]
async fn admin_server_answers_livez_readyz_and_metrics() {
    let handle = install_metrics().unwrap();
    assert!(
        install_metrics().is_ok(),
        "installing twice returns the same handle"
    );
    let queue = WorkQueue::<String>::new(QueueConfig::new("admin-test"));
    queue.add("a".into());
    queue.add("b".into());
    metrics::counter!("flotilla_admin_test_probes_total").increment(3);

    let shutdown = Shutdown::new();
    let mut writer = Writer::<String>::new();
    let readiness = Readiness::new();
    readiness.add_cache("bindings", &writer.cache());
    let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let admin = tokio::spawn(serve_admin(
        listener,
        Some(handle),
        readiness,
        shutdown.clone(),
    ));

    assert_eq!(get(addr, "/livez").await, (200, "ok\n".into()));
    assert_eq!(
        get(addr, "/readyz").await,
        (503, "not ready: bindings\n".into())
    );
    writer.apply_watcher_event(&Event::InitDone { revision: 1 });
    assert_eq!(get(addr, "/readyz").await, (200, "ok\n".into()));
    assert_eq!(get(addr, "/ready").await.0, 200);
    let (code, body) = get(addr, "/metrics").await;
    assert_eq!(code, 200);
    assert!(body.contains("flotilla_admin_test_queue_depth 2"), "{body}");
    assert!(
        body.contains("flotilla_admin_test_probes_total 3"),
        "{body}"
    );
    assert_eq!(get(addr, "/nope").await.0, 404);

    stop_task(
        &shutdown,
        Duration::from_secs(5),
        admin,
        "admin server stops on shutdown",
    )
    .await;
}

#[tokio::test]
async fn runtime_starts_on_the_mem_store_serves_and_stops_on_shutdown() {
    use clap::Parser;
    use flotilla_runtime::{CommonArgs, Runtime};

    #[derive(Parser)]
    struct Args {
        #[command(flatten)]
        common: CommonArgs,
    }
    let args = Args::try_parse_from(["svc", "--store", "mem", "--log", "warn"]).unwrap();
    let rt = Runtime::start(&args.common).await.unwrap();
    assert_eq!(rt.store.current_revision().await.unwrap(), 1);
    let grpc = rt
        .grpc_server(&[test_descriptor_set()], GrpcConfig::default())
        .await
        .unwrap();
    let grpc_listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let admin_listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let (grpc_addr, admin_addr) = (
        grpc_listener.local_addr().unwrap(),
        admin_listener.local_addr().unwrap(),
    );
    let serving = {
        let rt = rt.clone();
        tokio::spawn(async move { rt.serve_on(grpc, grpc_listener, admin_listener).await })
    };
    assert_eq!(get(admin_addr, "/livez").await.0, 200);
    // Nothing to sync: ready at once.
    assert_eq!(get(admin_addr, "/readyz").await.0, 200);
    let mut health = HealthClient::new(connect(grpc_addr).await);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while status(&mut health, "").await.unwrap() != ServingStatus::Serving {
        assert!(tokio::time::Instant::now() < deadline, "never SERVING");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop_task(
        &rt.shutdown,
        Duration::from_secs(10),
        serving,
        "both servers stop",
    )
    .await;
}
