//! A feed server on 127.0.0.1 for the agent tests (a thread serving
//! tiny_http, stopped on drop): it answers every GET with the current
//! [`Answer`], hostile ones included (a cut body, a body sent a byte at a
//! time, a redirect), and keeps what each POST sends (a fake LAPI's
//! usage metrics), answering 201.

use std::io::Read;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the feed server answers.
#[derive(Clone, Debug)]
pub enum Answer {
    /// The list, with an ETag; 304 to a request that names it.
    List(String),
    /// An HTTP error.
    Status(u16),
    /// A body that promises more bytes than it sends, then closes.
    Cut(String),
    /// A body sent one byte per interval (the server is busy meanwhile,
    /// and [`FeedServer::trickling`] says so).
    Trickle(String, Duration),
    /// A 302 to this URL.
    Redirect(String),
    /// A CrowdSec stream: the first list to a request for the whole list
    /// (`startup=true`), the second to a request for changes.
    Stream { whole: String, changes: String },
}

/// A body read one byte per interval, with a flag up while it is sent;
/// cut short when the server stops.
struct Trickling {
    body: std::io::Cursor<Vec<u8>>,
    interval: Duration,
    flag: Arc<AtomicBool>,
    stopping: Arc<AtomicBool>,
}

impl Read for Trickling {
    fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
        if buffer.is_empty() {
            return Ok(0);
        }
        std::thread::sleep(self.interval);
        if self.stopping.load(Ordering::SeqCst) {
            return Err(std::io::Error::other("the feed server stops"));
        }
        let read = self.body.read(&mut buffer[..1])?;
        if read == 0 {
            self.flag.store(false, Ordering::SeqCst);
        }
        Ok(read)
    }
}

impl Drop for Trickling {
    fn drop(&mut self) {
        self.flag.store(false, Ordering::SeqCst);
    }
}

/// What one POST sent.
#[derive(Clone, Debug)]
pub struct Post {
    pub url: String,
    /// Its headers, as `name: value` lines.
    pub headers: Vec<String>,
    pub body: String,
}

/// A feed server on 127.0.0.1: `GET /list` answers with the current
/// [`Answer`]; it counts conditional requests and keeps the URL of each.
pub struct FeedServer {
    pub address: SocketAddr,
    answer: Arc<Mutex<Answer>>,
    pub not_modified: Arc<AtomicU64>,
    /// The URL (path and query) of every request, in order.
    pub requests: Arc<Mutex<Vec<String>>>,
    /// Every POST, in order.
    pub posts: Arc<Mutex<Vec<Post>>>,
    /// Whether a [`Answer::Trickle`] body is being sent now.
    pub trickling: Arc<AtomicBool>,
    stopping: Arc<AtomicBool>,
    server: Arc<tiny_http::Server>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn etag_of(body: &str) -> String {
    use std::hash::{BuildHasher, BuildHasherDefault};
    let hash =
        BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default().hash_one(body);
    format!("\"{hash:x}\"")
}

impl FeedServer {
    pub fn start(answer: Answer) -> Self {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("a feed server"));
        let address = server.server_addr().to_ip().expect("an IP address");
        let answer = Arc::new(Mutex::new(answer));
        let not_modified = Arc::new(AtomicU64::new(0));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let posts = Arc::new(Mutex::new(Vec::new()));
        let trickling = Arc::new(AtomicBool::new(false));
        let stopping = Arc::new(AtomicBool::new(false));
        let thread = {
            let (server, answer) = (Arc::clone(&server), Arc::clone(&answer));
            let (not_modified, requests) = (Arc::clone(&not_modified), Arc::clone(&requests));
            let (trickling, stopping) = (Arc::clone(&trickling), Arc::clone(&stopping));
            let posts = Arc::clone(&posts);
            std::thread::spawn(move || {
                for mut request in server.incoming_requests() {
                    requests
                        .lock()
                        .expect("the requests")
                        .push(request.url().to_owned());
                    if *request.method() == tiny_http::Method::Post {
                        let mut body = String::new();
                        let _ = request.as_reader().read_to_string(&mut body);
                        let post = Post {
                            url: request.url().to_owned(),
                            headers: request
                                .headers()
                                .iter()
                                .map(|header| format!("{}: {}", header.field, header.value))
                                .collect(),
                            body,
                        };
                        posts.lock().expect("the posts").push(post);
                        let _ = request.respond(tiny_http::Response::empty(201));
                        continue;
                    }
                    let condition = request
                        .headers()
                        .iter()
                        .find(|header| header.field.equiv("If-None-Match"))
                        .map(|header| header.value.to_string());
                    let answer = answer.lock().expect("the answer").clone();
                    let _ = match answer {
                        Answer::List(body) => {
                            let etag = etag_of(&body);
                            if condition.as_deref() == Some(etag.as_str()) {
                                not_modified.fetch_add(1, Ordering::SeqCst);
                                request.respond(tiny_http::Response::empty(304))
                            } else {
                                let header =
                                    tiny_http::Header::from_bytes("ETag", etag).expect("a header");
                                request.respond(
                                    tiny_http::Response::from_string(body).with_header(header),
                                )
                            }
                        }
                        Answer::Status(code) => request.respond(tiny_http::Response::empty(code)),
                        Answer::Cut(body) => {
                            let promised = body.len() * 2;
                            request.respond(tiny_http::Response::new(
                                tiny_http::StatusCode(200),
                                Vec::new(),
                                std::io::Cursor::new(body.into_bytes()),
                                Some(promised),
                                None,
                            ))
                        }
                        Answer::Trickle(body, interval) => {
                            trickling.store(true, Ordering::SeqCst);
                            let length = body.len();
                            let body = Trickling {
                                body: std::io::Cursor::new(body.into_bytes()),
                                interval,
                                flag: Arc::clone(&trickling),
                                stopping: Arc::clone(&stopping),
                            };
                            request.respond(tiny_http::Response::new(
                                tiny_http::StatusCode(200),
                                Vec::new(),
                                body,
                                Some(length),
                                None,
                            ))
                        }
                        Answer::Redirect(to) => {
                            let header =
                                tiny_http::Header::from_bytes("Location", to).expect("a header");
                            request.respond(tiny_http::Response::empty(302).with_header(header))
                        }
                        Answer::Stream { whole, changes } => {
                            let everything = request.url().contains("startup=true");
                            let body = if everything { whole } else { changes };
                            request.respond(tiny_http::Response::from_string(body))
                        }
                    };
                }
            })
        };
        Self {
            address,
            answer,
            not_modified,
            requests,
            posts,
            trickling,
            stopping,
            server,
            thread: Some(thread),
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}/list", self.address)
    }

    pub fn set(&self, answer: Answer) {
        *self.answer.lock().expect("the answer") = answer;
    }
}

impl Drop for FeedServer {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.server.unblock();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
