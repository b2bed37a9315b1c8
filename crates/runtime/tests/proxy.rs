//! The test TCP proxy's cut is a partition: once `cut()` returned, no byte crosses it. (It
//! used to only flag the cut, so bytes sent right after could still be relayed, and the
//! watcher test that cuts etcd's link saw an event "through" the partition.)

use std::time::Duration;

use flotilla_runtime::testing::TcpProxy;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_crosses_a_cut_proxy() {
    for round in 0..200 {
        let upstream = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy = TcpProxy::start(upstream.local_addr().unwrap())
            .await
            .unwrap();
        let mut client = TcpStream::connect(proxy.addr()).await.unwrap();
        let (mut server, _) = upstream.accept().await.unwrap();
        // the link works
        server.write_all(b"a").await.unwrap();
        let mut one = [0u8; 1];
        client.read_exact(&mut one).await.unwrap();
        proxy.cut().await;
        // sent after the cut: never arrives
        let _ = server.write_all(b"b").await;
        let mut buf = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_millis(20), client.read(&mut buf)).await;
        if let Ok(Ok(n)) = read {
            assert_eq!(n, 0, "round {round}: a byte crossed the cut proxy");
        }
    }
}
