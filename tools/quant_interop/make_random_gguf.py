# Usage: make_random_gguf.py <llama gguf with a vocab> <out.gguf>
# Writes a 1-layer random llama GGUF (F32) whose rows are multiples of 256, reusing the vocab keys.
import struct, random, sys
src=open(sys.argv[1],'rb').read()
off=0
def rd(fmt):
    global off
    v=struct.unpack_from('<'+fmt,src,off); off+=struct.calcsize('<'+fmt); return v
magic,ver=rd('4sI'); nt,nkv=rd('QQ')
def rstr():
    global off
    (n,)=rd('Q'); s=src[off:off+n]; off+=n; return s
def skipval(t):
    global off
    if t==8: rstr(); return
    if t==9:
        (et,n)=rd('IQ'); [skipval(et) for _ in range(n)]; return
    off+=struct.calcsize('<'+{0:'B',1:'b',2:'H',3:'h',4:'I',5:'i',6:'f',7:'?',10:'Q',11:'q',12:'d'}[t])
kvs=[]
for i in range(nkv):
    s0=off; k=rstr(); (t,)=rd('I'); skipval(t); raw=src[s0:off]
    if k.startswith(b'tokenizer.') or k.startswith(b'general.'): kvs.append(raw)
def s(x): x=x.encode(); return struct.pack('<Q',len(x))+x
def kv_u32(k,v): return s(k)+struct.pack('<II',4,v)
def kv_f32(k,v): return s(k)+struct.pack('<If',6,v)
E,F,V,H=256,512,512,8
kvs += [kv_u32('llama.context_length',256),kv_u32('llama.embedding_length',E),kv_u32('llama.feed_forward_length',F),
        kv_u32('llama.attention.head_count',H),kv_u32('llama.attention.head_count_kv',H),kv_u32('llama.block_count',1),
        kv_u32('llama.rope.dimension_count',E//H),kv_f32('llama.attention.layer_norm_rms_epsilon',1e-5)]
tensors=[('token_embd.weight',(E,V)),('output_norm.weight',(E,)),('output.weight',(E,V)),
 ('blk.0.attn_q.weight',(E,E)),('blk.0.attn_k.weight',(E,E)),('blk.0.attn_v.weight',(E,E)),('blk.0.attn_output.weight',(E,E)),
 ('blk.0.attn_norm.weight',(E,)),('blk.0.ffn_gate.weight',(E,F)),('blk.0.ffn_down.weight',(F,E)),('blk.0.ffn_up.weight',(E,F)),
 ('blk.0.ffn_norm.weight',(E,))]
random.seed(5)
hdr=b'GGUF'+struct.pack('<IQQ',3,len(tensors),len(kvs))+b''.join(kvs)
data=b''; infos=b''
for n,ne in tensors:
    cnt=1
    for x in ne: cnt*=x
    vals=[random.gauss(0,1) for _ in range(cnt)]
    infos+=s(n)+struct.pack('<I',len(ne))+b''.join(struct.pack('<Q',x) for x in ne)+struct.pack('<IQ',0,len(data))
    data+=struct.pack('<%df'%cnt,*vals)
    data+=b'\0'*((-len(data))%32)
out=hdr+infos
out+=b'\0'*((-len(out))%32)
open(sys.argv[2],'wb').write(out+data)
