# campaign-sender image: the production binary only, on a minimal non-root runtime. The fake
# provider and the load harnesses are workspace crates of their own and are not built here.
# Not built in this repository's CI (no container engine there); keep it simple enough to
# review:
#   docker build -t campaign-sender:0.1.0 .
#
# Stage 1: dependencies only, so a source change does not rebuild them.
# The toolchain the project is built and tested with (Cargo.lock needs it).
FROM rust:1.95-slim-bookworm AS deps
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY fake-provider/Cargo.toml fake-provider/
COPY loadtest/Cargo.toml loadtest/
# Stub targets with the manifests' paths (every workspace member must parse), to build and cache
# the production crate's dependency graph.
RUN mkdir -p src benches tests/it fake-provider/src loadtest/src/bin/drain loadtest/src/bin/chaos \
    loadtest/src/bin/days loadtest/src/bin/forget \
 && echo 'fn main() {}' > src/main.rs \
 && echo '' > src/lib.rs \
 && echo 'fn main() {}' > benches/engine.rs \
 && echo '' > tests/it/main.rs \
 && echo '' > fake-provider/src/lib.rs \
 && echo 'fn main() {}' > fake-provider/src/main.rs \
 && echo '' > loadtest/src/lib.rs \
 && echo 'fn main() {}' > loadtest/src/bin/drain/main.rs \
 && echo 'fn main() {}' > loadtest/src/bin/chaos/main.rs \
 && echo 'fn main() {}' > loadtest/src/bin/days/main.rs \
 && echo 'fn main() {}' > loadtest/src/bin/forget/main.rs \
 && cargo build --locked --release -p campaign-sender --bin campaign-sender \
 && rm -rf src

# Stage 2: the real build (sqlx's migrations are embedded at compile time from migrations/).
FROM deps AS build
COPY src src
COPY migrations migrations
RUN touch src/main.rs src/lib.rs \
 && cargo build --locked --release -p campaign-sender --bin campaign-sender

# Stage 3: runtime. distroless/cc has glibc and CA roots (rustls uses its bundled webpki roots
# anyway), no shell, no package manager; "nonroot" is uid 65532 — the manifests run as 10001,
# which needs no passwd entry.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/campaign-sender /usr/local/bin/campaign-sender
USER 10001:10001
EXPOSE 9090
ENTRYPOINT ["/usr/local/bin/campaign-sender"]
CMD ["run"]
