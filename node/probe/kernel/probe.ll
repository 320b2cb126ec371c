target datalayout = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.nctaid.x()

define internal i64 @mix(i64 %x) alwaysinline {
  %z0 = add i64 %x, -7046029254386353131
  %s1 = lshr i64 %z0, 30
  %x1 = xor i64 %z0, %s1
  %z1 = mul i64 %x1, -4658895280553007687
  %s2 = lshr i64 %z1, 27
  %x2 = xor i64 %z1, %s2
  %z2 = mul i64 %x2, -7723592293110705685
  %s3 = lshr i64 %z2, 31
  %r = xor i64 %z2, %s3
  ret i64 %r
}

define internal i64 @gid() alwaysinline {
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %c = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %n = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %t64 = zext i32 %t to i64
  %c64 = zext i32 %c to i64
  %n64 = zext i32 %n to i64
  %b = mul i64 %c64, %n64
  %g = add i64 %b, %t64
  ret i64 %g
}

define internal i64 @stride() alwaysinline {
  %n = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %g = call i32 @llvm.nvvm.read.ptx.sreg.nctaid.x()
  %n64 = zext i32 %n to i64
  %g64 = zext i32 %g to i64
  %s = mul i64 %n64, %g64
  ret i64 %s
}

; fill(buf, seed, n): buf[i] = mix(seed ^ i)
define void @gpumesh_fill(i64* %buf, i64 %seed, i64 %n) {
entry:
  %i0 = call i64 @gid()
  %st = call i64 @stride()
  br label %loop
loop:
  %i = phi i64 [ %i0, %entry ], [ %inext, %body ]
  %more = icmp ult i64 %i, %n
  br i1 %more, label %body, label %done
body:
  %v = xor i64 %seed, %i
  %w = call i64 @mix(i64 %v)
  %p = getelementptr i64, i64* %buf, i64 %i
  store i64 %w, i64* %p, align 8
  %inext = add i64 %i, %st
  br label %loop
done:
  ret void
}

; round(out, in, n, mask, m, c): out[i] = mix(in[i] ^ rotl(in[(i & ~mask) | ((i ^ m) & mask)], 17) ^ c)
define void @gpumesh_round(i64* %out, i64* %in, i64 %n, i64 %mask, i64 %m, i64 %c) {
entry:
  %i0 = call i64 @gid()
  %st = call i64 @stride()
  %nmask = xor i64 %mask, -1
  br label %loop
loop:
  %i = phi i64 [ %i0, %entry ], [ %inext, %body ]
  %more = icmp ult i64 %i, %n
  br i1 %more, label %body, label %done
body:
  %hi = and i64 %i, %nmask
  %im = xor i64 %i, %m
  %lo = and i64 %im, %mask
  %j = or i64 %hi, %lo
  %pa = getelementptr i64, i64* %in, i64 %i
  %a = load i64, i64* %pa, align 8
  %pb = getelementptr i64, i64* %in, i64 %j
  %b = load i64, i64* %pb, align 8
  %bl = shl i64 %b, 17
  %br = lshr i64 %b, 47
  %rot = or i64 %bl, %br
  %x1 = xor i64 %a, %rot
  %x2 = xor i64 %x1, %c
  %w = call i64 @mix(i64 %x2)
  %po = getelementptr i64, i64* %out, i64 %i
  store i64 %w, i64* %po, align 8
  %inext = add i64 %i, %st
  br label %loop
done:
  ret void
}

; digest(out, in, blockWords, blocks): out[t] = xor of in[t*bw .. (t+1)*bw)
define void @gpumesh_digest(i64* %out, i64* %in, i64 %bw, i64 %blocks) {
entry:
  %t = call i64 @gid()
  %ok = icmp ult i64 %t, %blocks
  br i1 %ok, label %start, label %done
start:
  %base = mul i64 %t, %bw
  br label %loop
loop:
  %k = phi i64 [ 0, %start ], [ %knext, %body ]
  %acc = phi i64 [ 0, %start ], [ %acc2, %body ]
  %more = icmp ult i64 %k, %bw
  br i1 %more, label %body, label %store
body:
  %idx = add i64 %base, %k
  %p = getelementptr i64, i64* %in, i64 %idx
  %v = load i64, i64* %p, align 8
  %acc2 = xor i64 %acc, %v
  %knext = add i64 %k, 1
  br label %loop
store:
  %po = getelementptr i64, i64* %out, i64 %t
  store i64 %acc, i64* %po, align 8
  br label %done
done:
  ret void
}

!nvvm.annotations = !{!0, !1, !2}
!0 = !{void (i64*, i64, i64)* @gpumesh_fill, !"kernel", i32 1}
!1 = !{void (i64*, i64*, i64, i64, i64, i64)* @gpumesh_round, !"kernel", i32 1}
!2 = !{void (i64*, i64*, i64, i64)* @gpumesh_digest, !"kernel", i32 1}
