//! The messages, server and client generated from `proto/grpc_service.proto` by
//! `build.rs` (package `inference`).

#![allow(missing_docs, clippy::all, clippy::pedantic)]

tonic::include_proto!("inference");
